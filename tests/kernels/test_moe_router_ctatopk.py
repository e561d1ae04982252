"""The CTA-per-token top-16 of the mma_ctatopk family (a second kernel, 7 warps; also after
mma_rowsplit's GEMM, with a ballot instead of the second redux in mma_ctatopk_ballot, and with
pre-sorted lanes and binary-search ranks in mma_ctatopk_merge) and of
the mma_fused family (the tail of the GEMM kernel, its WARPS warps), emulated in PyTorch on the CPU
step by step (split-order partial sum, ordered-int keys, per-warp 16 rounds of lane argmax +
redux max/min, rank merge of the candidates, butterfly weight sum) with the rendered module's
own `expert_of` / `ordered_key` / `cand_slot`, against the reference on adversarial inputs."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point

from kernel_helpers import ROOT, load_module


@pytest.fixture(scope="module", params=["mma_ctatopk", "mma_fused", "mma_rowsplit", "mma_ctatopk_ballot", "mma_ctatopk_merge"])
def cta_module(request):
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/moe_router/{request.param}.py.j2", "moe_router")
    d = Path(tempfile.mkdtemp(prefix=f"router-{request.param}-"))
    (d / "kernel.py").write_text(fam.render(fam.start()))
    return load_module(d / "kernel.py", f"router_{request.param}_default")


def topk_warps(m) -> int:
    """Warps of one token's top-k: the top-k kernel's (ctatopk) or the whole GEMM CTA's (fused)."""
    return m.TOPK_WARPS if hasattr(m, "TOPK_WARPS") else m.WARPS


def emulate_topk(m, parts: torch.Tensor, bias: torch.Tensor):
    """parts: fp32 [CTA_SPLITS, B, E] partial logits; returns (weights, ids) as the kernel writes them."""
    lg = parts[0].clone()
    for s in range(1, parts.shape[0]):                 # split order
        lg = lg + parts[s]
    sc = torch.tensor(1.0) / (torch.tensor(1.0) + torch.exp(-lg))
    okey = m.ordered_key((sc + bias).view(torch.int32))
    B = parts.shape[1]
    out_w = torch.zeros(B, m.TOP_K)
    out_i = torch.zeros(B, m.TOP_K, dtype=torch.int32)
    for b in range(B):
        ck = [0] * m.NCAND
        ci = [0] * m.NCAND
        cs = [0.0] * m.NCAND
        for warp in range(topk_warps(m)):
            lanes = [32 * warp + lane for lane in range(32)]
            key = {t: [int(okey[b, m.expert_of(t, v)]) if m.expert_of(t, v) < m.E else m.INT_MIN  # past E: retired
                       for v in range(m.EPT)] for t in lanes}
            for rnd in range(m.TOP_K):
                best = {}
                for t in lanes:                         # tree: strict '>' moves right, ties stay left
                    cand = [(key[t][v], v) for v in range(m.EPT)]
                    while len(cand) > 1:
                        nxt = [cand[p + 1] if cand[p + 1][0] > cand[p][0] else cand[p] for p in range(0, len(cand) - 1, 2)]
                        if len(cand) % 2:
                            nxt.append(cand[-1])
                        cand = nxt
                    best[t] = cand[0]
                top = max(k for k, _ in best.values())                                  # redux max
                bi = min(m.expert_of(t, j) if k == top else m.E for t, (k, j) in best.items())  # redux min
                winners = [t for t, (k, j) in best.items() if m.expert_of(t, j) == bi]
                if getattr(m, "TOPK_BALLOT", False):     # the kernel takes the lowest lane holding the max
                    lowest = min(t for t, (k, _) in best.items() if k == top)
                    assert winners == [lowest], (winners, lowest)     # = the lowest id: the tie rule holds
                assert len(winners) == 1
                t = winners[0]
                j = best[t][1]
                assert key[t][j] > m.INT_MIN                   # never re-picks a retired slot
                key[t][j] = m.INT_MIN
                slot = m.cand_slot(warp, rnd)
                ck[slot], ci[slot], cs[slot] = top, bi, float(sc[b, bi])
        assert sorted(ci) == sorted(set(ci))            # NCAND distinct candidates
        if getattr(m, "TOPK_MERGE", False):
            assert merge_phase1(m, okey[b], sc[b]) == (ck, ci, cs)      # pre-sorted lanes: the same lists
        sw = [0.0] * 32
        si = [0] * 32
        for i in range(m.NCAND):
            rank = sum(1 for j in range(m.NCAND) if ck[j] > ck[i] or (ck[j] == ck[i] and ci[j] < ci[i]))
            if getattr(m, "TOPK_MERGE", False):
                assert merge_rank(m, ck, ci, i) == rank
            if rank < m.TOP_K:
                sw[rank], si[rank] = cs[i], ci[i]
        vals = [torch.tensor(v, dtype=torch.float32) for v in sw]
        for off in (16, 8, 4, 2, 1):                    # butterfly sum
            vals = [vals[l] + vals[l ^ off] for l in range(32)]
        out_w[b] = torch.stack([torch.tensor(sw[l], dtype=torch.float32) / vals[l] * m.ROUTED_SCALING_FACTOR
                                for l in range(m.TOP_K)])
        out_i[b] = torch.tensor(si[: m.TOP_K], dtype=torch.int32)
    return out_w, out_i


def merge_phase1(m, okey_row: torch.Tensor, sc_row: torch.Tensor):
    """mma_ctatopk_merge's phase 1 step by step: each lane sorts its slots with the module's
    SORT4 network and `beats` (slot as the id), then per round redux max of the heads, the
    lowest lane holding it wins (ballot) and pops its head. Returns the (keys, ids, scores) slots."""
    ck, ci, cs = [0] * m.NCAND, [0] * m.NCAND, [0.0] * m.NCAND
    for warp in range(m.TOPK_WARPS):
        heads = {}
        for lane in range(32):
            t = 32 * warp + lane
            hk = [int(okey_row[m.expert_of(t, v)]) for v in range(m.EPT)]
            hv = list(range(m.EPT))
            for i, j in m.SORT4:
                if m.beats(hk[j], hv[j], hk[i], hv[i]):
                    hk[i], hk[j], hv[i], hv[j] = hk[j], hk[i], hv[j], hv[i]
            assert [(k, v) for k, v in zip(hk, hv)] == sorted(zip(hk, hv), key=lambda kv: (-kv[0], kv[1]))
            heads[lane] = (hk, hv)
        for rnd in range(m.TOP_K):
            top = max(hk[0] for hk, _ in heads.values())                      # redux max
            lane = min(lane for lane, (hk, _) in heads.items() if hk[0] == top)  # ballot: lowest lane
            hk, hv = heads[lane]
            eid = m.expert_of(32 * warp + lane, hv[0])
            slot = m.cand_slot(warp, rnd)
            ck[slot], ci[slot], cs[slot] = top, eid, float(sc_row[eid])
            heads[lane] = (hk[1:] + [m.INT_MIN], hv[1:] + [hv[-1]])
    return ck, ci, cs


def merge_rank(m, ck, ci, i) -> int:
    """mma_ctatopk_merge's phase 2 for candidate slot i: per warp list, SEARCH_STEPS probes then
    one more, counting the list's candidates that beat it."""
    rank = 0
    for w2 in range(m.TOPK_WARPS):
        base = m.cand_slot(w2, 0)
        pos = 0
        for step in m.SEARCH_STEPS:
            q = base + pos + step - 1
            pos += step if m.beats(ck[q], ci[q], ck[i], ci[i]) else 0
        pos += 1 if m.beats(ck[base + pos], ci[base + pos], ck[i], ci[i]) else 0
        rank += pos
    return rank


def parts_of(m, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Split s of the GEMM grid covers K columns [s * H / CTA_SPLITS, (s + 1) * H / CTA_SPLITS)."""
    kc = m.H // m.CTA_SPLITS
    return torch.stack([x.float()[:, s * kc:(s + 1) * kc] @ w.float()[:, s * kc:(s + 1) * kc].t()
                        for s in range(m.CTA_SPLITS)])


def reference_from_logits(logits: torch.Tensor, bias: torch.Tensor):
    scores = torch.sigmoid(logits)
    ids = torch.topk(scores + bias, 16, dim=-1, sorted=True).indices
    wts = scores.gather(1, ids)
    return {"topk_weights": wts / wts.sum(-1, keepdim=True), "topk_ids": ids.to(torch.int32)}


def stable_top16(key: torch.Tensor) -> list[int]:
    """Exact order of a stable sort by (-key, id): what ranks with lower-id ties give."""
    return sorted(range(key.numel()), key=lambda i: (-float(key[i]), i))[:16]


def check_against_reference(m, logits: torch.Tensor, bias: torch.Tensor):
    """Logits split into CTA_SPLITS partials that sum (in split order) exactly to `logits`."""
    parts = torch.zeros(m.CTA_SPLITS, *logits.shape)
    parts[0] = logits
    w, ids = emulate_topk(m, parts, bias)
    ref = reference_from_logits(logits, bias)
    scores = torch.sigmoid(logits)
    key = scores + bias
    for b in range(logits.shape[0]):
        assert ids[b].tolist() == stable_top16(key[b]), b
        got = set(ids[b].tolist())
        want = set(ref["topk_ids"][b].tolist())
        kth = torch.sort(key[b], descending=True).values[15]
        assert all(abs(float(key[b, i]) - float(kth)) <= 1e-6 for i in got ^ want)   # differences are ties only
        w_by_id = dict(zip(ids[b].tolist(), w[b].tolist()))
        sel = torch.tensor(ids[b].tolist())
        want_w = scores[b, sel] / scores[b, sel].sum()
        assert torch.allclose(torch.tensor([w_by_id[i] for i in sel.tolist()]), want_w, rtol=1e-4, atol=1e-6)


def test_index_maps(cta_module):
    m = cta_module
    nw = topk_warps(m)
    ids = sorted(m.expert_of(t, v) for t in range(32 * nw) for v in range(m.EPT))
    assert [i for i in ids if i < m.E] == list(range(m.E))     # every expert owned once
    for warp in range(nw):                              # slots past E: a whole warp's or none
        own = sum(m.expert_of(32 * warp + l, v) < m.E for l in range(32) for v in range(m.EPT))
        assert own >= m.TOP_K
        for v in range(m.EPT):
            assert len({m.expert_of(32 * warp + l, v) >= m.E for l in range(32)}) == 1, (warp, v)
    for t in range(32 * nw):                            # slot order is id order (the tie rule)
        assert all(m.expert_of(t, v) < m.expert_of(t, v + 1) for v in range(m.EPT - 1))
    slots = sorted(m.cand_slot(w, r) for w in range(nw) for r in range(m.TOP_K))
    assert slots == list(range(m.NCAND)) and m.NCAND == 16 * nw


def test_ordered_key_preserves_float_order(cta_module):
    m = cta_module
    f = torch.tensor([-float("inf"), -3.5, -1.0, -1e-30, 0.0, 1e-30, 0.25, 0.5, 0.5000001, 2.0, float("inf")])
    o = m.ordered_key(f.view(torch.int32))
    assert bool((o[1:] > o[:-1]).all())
    assert bool((o > m.INT_MIN).all())


def test_matches_reference_on_random_inputs(cta_module):
    m = cta_module
    defn = reference_impls.get("moe_router")
    inputs = defn.make_inputs(Point(batch=3), torch.Generator().manual_seed(11), "cpu")
    w, ids = emulate_topk(m, parts_of(m, inputs["x"], inputs["router_weight"]), inputs["e_score_bias"])
    res = compare(defn, {"topk_weights": w, "topk_ids": ids}, defn.run_reference(inputs), inputs)
    assert res.ok, res.summary()


def test_all_keys_equal_gives_lowest_ids(cta_module):
    m = cta_module
    logits = torch.zeros(1, m.E)
    w, ids = emulate_topk(m, torch.zeros(m.CTA_SPLITS, 1, m.E), torch.zeros(m.E))
    assert ids[0].tolist() == list(range(16))
    assert torch.allclose(w[0], torch.full((16,), 1 / 16))
    check_against_reference(m, logits, torch.zeros(m.E))


def test_equal_scores_across_warps(cta_module):
    """Ties at the 16th key spread over every warp; 16 winners also packed in one warp."""
    m = cta_module
    bias = torch.zeros(m.E)
    bias[[5, 130, 131, 260, 400, 401, 402, 520, 650, 780, 895, 127, 128, 255, 256]] = 1.0   # 15 winners
    bias[[3, 140, 300, 515, 700, 890, 1]] = 0.5        # tie for the 16th place across warps
    check_against_reference(m, torch.zeros(2, m.E), bias)
    bias2 = torch.zeros(m.E)
    bias2[256:256 + 20] = torch.linspace(1.0, 2.0, 20)  # all of the top-16 in one warp (ctatopk 2, fused 0)
    check_against_reference(m, torch.zeros(1, m.E), bias2)


def test_negative_logits_and_keys(cta_module):
    m = cta_module
    g = torch.Generator().manual_seed(5)
    logits = -3.0 - 4.0 * torch.rand(4, m.E, generator=g)
    bias = -2.0 + 0.01 * torch.randn(m.E, generator=g)
    logits[1, 700] = -0.5
    logits[2, :] = -6.0                                 # a row of exact ties with negative keys
    logits[3, 100:120] = torch.tensor(-4.0)             # ties among the winners
    bias[100:120] = 1.0
    check_against_reference(m, logits, bias)


@pytest.mark.parametrize("family", ["mma_ctatopk_ballot", "mma_ctatopk_merge"])
def test_ballot_ptx_has_one_redux_per_round(family, tmp_path):
    """16 redux.sync max and 16 ballots in the top-k kernel, no redux min; the merge family's
    phase 2 reads 7 lists x 5 probes x (key, id) from shared memory (plus its own slot)."""
    from kernel_helpers import compiled_ptx, family_candidates, ptx_entries

    cid = family_candidates("moe_router", family)[0]
    topk = ptx_entries(compiled_ptx(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", tmp_path))["kernel_cutlass_topk_kernel"]
    assert len(re.findall(r"redux\.sync\.max\.s32", topk)) == 16
    assert len(re.findall(r"vote\.sync\.ballot\.b32", topk)) == 16
    assert "redux.sync.min" not in topk
    if family == "mma_ctatopk_merge":
        loads = len(re.findall(r"ld\.shared\.(?:u32|b32|s32)", topk))
        assert 70 <= loads <= 80, loads
