"""The router kernel's index maps and selection rule, emulated in PyTorch on the CPU.

Uses the rendered module's own `k_vector` / `expert_of` (the functions the kernel traces),
so a wrong partition or lane map fails here before it reaches a GPU."""
from __future__ import annotations

import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point


def test_split_k_partition_covers_k_once(router_module):
    m = router_module
    seen = torch.zeros(m.H // m.VEC, dtype=torch.int32)
    for split in range(m.SPLITS):
        for it in range(m.ITERS):
            for lane in range(32):
                seen[m.k_vector(split, it, lane)] += 1
    assert bool((seen == 1).all())


def test_expert_lane_map_is_a_bijection_in_id_order(router_module):
    m = router_module
    ids = [[m.expert_of(lane, slot) for slot in range(m.EPL)] for lane in range(32)]
    flat = sorted(i for row in ids for i in row)
    assert flat == list(range(m.E))
    for row in ids:                                   # tree ties keep the left = lower id
        assert row == sorted(row)
    for lane in range(32):                            # each 4-slot chunk is one 16-byte vector
        for c in range(m.CHUNKS):
            assert ids[lane][4 * c] % 4 == 0 and ids[lane][4 * c + 3] == ids[lane][4 * c] + 3


def emulate_router(m, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor):
    """The kernel's algorithm step by step: per-split partials over the k_vector partition,
    fixed-order split sum, sigmoid, 16 rounds of (lane tree argmax, butterfly with
    lower-id ties, retire)."""
    B = x.shape[0]
    xf, wf = x.float(), w.float()
    parts = torch.zeros(m.SPLITS, B, m.E)
    for split in range(m.SPLITS):
        kv = torch.tensor([m.k_vector(split, it, lane) for it in range(m.ITERS) for lane in range(32)])
        cols = (kv[:, None] * m.VEC + torch.arange(m.VEC)).flatten()
        parts[split] = xf[:, cols] @ wf[:, cols].t()
    logits = parts[0].clone()
    for s in range(1, m.SPLITS):
        logits = logits + parts[s]
    scores = torch.sigmoid(logits)
    keys = scores + bias
    lane_ids = torch.tensor([[m.expert_of(lane, j) for j in range(m.EPL)] for lane in range(32)])
    out_w = torch.zeros(B, m.TOP_K)
    out_i = torch.zeros(B, m.TOP_K, dtype=torch.int32)
    for b in range(B):
        key = keys[b][lane_ids].clone()              # [32 lanes, 28 slots]
        sc = scores[b][lane_ids]
        picked = []
        for rnd in range(m.TOP_K):
            best = []
            for lane in range(32):                   # tree: strict '>' moves right, ties stay left
                cand = [(float(key[lane, j]), float(sc[lane, j]), j) for j in range(m.EPL)]
                while len(cand) > 1:
                    nxt = [cand[p + 1] if cand[p + 1][0] > cand[p][0] else cand[p] for p in range(0, len(cand) - 1, 2)]
                    if len(cand) % 2:
                        nxt.append(cand[-1])
                    cand = nxt
                k_, s_, j_ = cand[0]
                best.append((k_, s_, m.expert_of(lane, j_), j_))
            vals = [(k_, s_, i_) for k_, s_, i_, _ in best]
            for off in (16, 8, 4, 2, 1):             # butterfly
                vals = [(vals[l ^ off] if (vals[l ^ off][0] > vals[l][0] or
                                           (vals[l ^ off][0] == vals[l][0] and vals[l ^ off][2] < vals[l][2]))
                         else vals[l]) for l in range(32)]
            assert all(v == vals[0] for v in vals)   # every lane ends with the winner
            bk, bs, bi = vals[0]
            for lane in range(32):
                if m.expert_of(lane, best[lane][3]) == bi:
                    key[lane, best[lane][3]] = -float("inf")
            picked.append((bs, bi))
        wsum = 0.0
        for bs, _ in picked:
            wsum += bs
        out_w[b] = torch.tensor([bs / wsum * m.ROUTED_SCALING_FACTOR for bs, _ in picked])
        out_i[b] = torch.tensor([bi for _, bi in picked], dtype=torch.int32)
    return out_w, out_i


def test_emulated_router_matches_reference(router_module):
    defn = reference_impls.get("moe_router")
    point = Point(batch=3)
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(7), "cpu")
    w, ids = emulate_router(router_module, inputs["x"], inputs["router_weight"], inputs["e_score_bias"])
    res = compare(defn, {"topk_weights": w, "topk_ids": ids}, defn.run_reference(inputs), inputs)
    assert res.ok, res.summary()


def test_ties_go_to_the_lowest_expert_id(router_module):
    """Equal keys everywhere except a block: the selection must be the lowest ids among ties,
    exactly like a stable sort by (-key, id)."""
    m = router_module
    keys = torch.zeros(m.E)
    keys[100:110] = 1.0                              # 10 clear winners, then 6 from a tie at 0.5
    keys[[700, 3, 450, 5, 600, 2, 800, 1]] = 0.5
    lane_ids = torch.tensor([[m.expert_of(lane, j) for j in range(m.EPL)] for lane in range(32)])
    key = keys[lane_ids].clone()
    chosen = []
    for _ in range(m.TOP_K):
        flat = [(float(key[l, j]), m.expert_of(l, j), l, j) for l in range(32) for j in range(m.EPL)]
        k_, i_, l_, j_ = max(flat, key=lambda t: (t[0], -t[1]))
        key[l_, j_] = -float("inf")
        chosen.append(i_)
    want = sorted(range(m.E), key=lambda i: (-float(keys[i]), i))[: m.TOP_K]
    assert chosen == want
    w, ids = emulate_router(m, torch.zeros(1, m.H, dtype=torch.bfloat16), torch.zeros(m.E, m.H, dtype=torch.bfloat16),
                            keys - 0.5)              # sigmoid(0) = 0.5: key = bias + 0.5 = keys
    assert ids[0].tolist() == want
