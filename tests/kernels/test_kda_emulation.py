"""CPU emulation of the kda_decode `fused` family at each human point: the kernel's CTA / warp / lane
ownership map (v_split row blocks, TPR lanes per row, KPL keys per lane), its reduction order
(lane partials in key order, xor butterflies, warp partials in warp order, cluster sum in rank
order) and its update order (decay, S@k, update, S@q from the fp32 S, store in the state dtype),
written from the template's index formulas in torch, checked against the reference with the op's
tolerances, plus: every state element, o element and conv_state channel written exactly once."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point

ROOT = Path(__file__).resolve().parents[2]
D = 128


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p["params"] for p in pts if p["op"] == "kda_decode" and p["family"] == "fused"]


def bfly(x: torch.Tensor, dim: int, offsets: list[int]) -> torch.Tensor:
    """shfl.bfly sums along `dim` (size n): at each offset, lane i adds lane i ^ off."""
    n = x.shape[dim]
    for off in offsets:
        idx = torch.arange(n) ^ off
        x = x + x.index_select(dim, idx)
    return x


def emulate(inp: dict[str, torch.Tensor], p: dict, tp: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    vs, tpr, warps = p["v_split"], p["threads_per_row"], p["warps"]
    kpl, rg, rb = D // tpr, 32 // tpr, D // vs
    rpp = warps * rg
    rpt = rb // rpp
    nslot = 2 * D + rb
    h = 96 // tp
    hdim = h * D
    bsz = inp["qkv"].shape[0]
    f32 = torch.float32
    qkv, cs, cw = inp["qkv"], inp["conv_state"], inp["conv_weight"]
    state = inp["state"]
    sdt = state.dtype
    state_out = torch.full_like(state, float("nan"))
    o_out = torch.full((bsz, hdim), float("nan"), dtype=torch.bfloat16)
    cs_out = cs.clone()
    cs_writes = torch.zeros(bsz, 3 * hdim, dtype=torch.int32)
    st_writes = torch.zeros(bsz, h, D, D, dtype=torch.int32)
    o_writes = torch.zeros(bsz, hdim, dtype=torch.int32)
    sig = torch.sigmoid
    rate = torch.exp(inp["A_log"].float())                                   # [h]
    beta = sig(inp["b"].float())                                             # [B, h]
    hh = torch.arange(h)
    # lane / row / key maps of the template: lane = grp * TPR + k_lane
    keys = torch.arange(tpr)[:, None] * kpl + torch.arange(kpl)[None, :]     # [TPR, KPL]
    row_groups = (torch.arange(rpt)[:, None, None] * rpp + torch.arange(warps)[None, :, None] * rg
                  + torch.arange(rg)[None, None, :])                         # local rows [RPT, W, RG]
    cta_sums = []
    per_rank = []
    for rank in range(vs):
        i = torch.arange(nslot)
        seg = i // D
        ch = i - seg * D + (seg // 2) * (rank * rb)
        gc = seg[None, :] * hdim + hh[:, None] * D + ch[None, :]             # [h, NSLOT]
        c = cs[:, gc].float()                                                # [B, h, NSLOT, 3]
        w = cw[gc].float()                                                   # [h, NSLOT, 4]
        x = qkv[:, gc].float()
        acc = c[..., 0] * w[..., 0]
        acc = acc + c[..., 1] * w[..., 1]
        acc = acc + c[..., 2] * w[..., 2]
        acc = acc + x * w[..., 3]
        y = acc * sig(acc)                                                   # ybuf [B, h, NSLOT]
        if vs == 1:
            cs_out[:, gc] = torch.stack([cs[:, gc, 1], cs[:, gc, 2], qkv[:, gc]], -1)
            cs_writes[:, gc] += 1
        kslot = i[seg == 1]
        kch = ch[seg == 1]
        a = rate[:, None] * (inp["f"].float()[:, hh[:, None] * D + kch] + inp["dt_bias"].float()[hh[:, None] * D + kch])
        dec = torch.empty(bsz, h, D)
        dec[:, :, kch] = torch.exp(-5.0 * sig(a))
        assert kslot.numel() == D
        # L2 norms: lane l sums channels 4l..4l+3 in order, 5-step butterfly
        lq = y[..., :D].reshape(bsz, h, 32, 4)
        lk = y[..., D:2 * D].reshape(bsz, h, 32, 4)
        sq = lq[..., 0] ** 2
        sk = lk[..., 0] ** 2
        for cc in range(1, 4):
            sq = sq + lq[..., cc] ** 2
            sk = sk + lk[..., cc] ** 2
        sq = bfly(sq, 2, [16, 8, 4, 2, 1])[..., 0]
        sk = bfly(sk, 2, [16, 8, 4, 2, 1])[..., 0]
        rq = torch.rsqrt(sq + 1e-6) * D ** -0.5
        rk = torch.rsqrt(sk + 1e-6)
        qv = y[..., :D][:, :, keys] * rq[..., None, None]                   # [B, h, TPR, KPL]
        kv = y[..., D:2 * D][:, :, keys] * rk[..., None, None]
        dv = dec[:, :, keys]
        rows = rank * rb + row_groups                                        # [RPT, W, RG]
        s_in = state[:, :, rows][:, :, :, :, :, keys].to(f32)                # [B, h, RPT, W, RG, TPR, KPL]
        e = (None, None, None)
        s = s_in * dv[:, :, None, None, None]
        kb, qb = kv[:, :, None, None, None], qv[:, :, None, None, None]
        part = s[..., 0] * kb[..., 0]
        for cc in range(1, kpl):
            part = part + s[..., cc] * kb[..., cc]
        pred = bfly(part, -1, [tpr >> (k + 1) for k in range(int(math.log2(tpr)))])
        v = y[..., 2 * D:][:, :, row_groups][..., None]                      # [B, h, RPT, W, RG, 1]
        u = beta[:, :, None, None, None, None] * (v - pred)
        s = s + kb * u[..., None]
        part = s[..., 0] * qb[..., 0]
        for cc in range(1, kpl):
            part = part + s[..., cc] * qb[..., cc]
        o = bfly(part, -1, [tpr >> (k + 1) for k in range(int(math.log2(tpr)))])  # [B, h, RPT, W, RG, TPR]
        idx_rows = rows[..., None, None].expand(rpt, warps, rg, tpr, kpl)
        idx_keys = keys.expand(rpt, warps, rg, tpr, kpl)
        state_out[:, :, idx_rows, idx_keys] = s.to(sdt)
        st_writes[:, :, idx_rows, idx_keys] += 1
        ss = o[:, :, 0] ** 2
        for j in range(1, rpt):
            ss = ss + o[:, :, j] ** 2                                        # [B, h, W, RG, TPR]
        ss = bfly(ss, 3, [1 << k for k in range(int(math.log2(rg)))])        # xor TPR..16 = xor on grp
        red = ss[:, :, :, 0, 0]                                              # lane 0 of each warp
        tot = red[:, :, 0]
        for wi in range(1, warps):
            tot = tot + red[:, :, wi]
        cta_sums.append(tot)
        per_rank.append((rows, o))
        del e
    if vs > 1:                                                               # the owner loop after the cluster barrier
        for rank in range(vs):
            i = torch.arange(3 * rb)
            gc = (i // rb)[None, :] * hdim + hh[:, None] * D + rank * rb + (i % rb)[None, :]
            cs_out[:, gc] = torch.stack([cs[:, gc, 1], cs[:, gc, 2], qkv[:, gc]], -1)
            cs_writes[:, gc] += 1
    tot = cta_sums[0]
    for t in cta_sums[1:]:
        tot = tot + t
    rstd = torch.rsqrt(tot * (1.0 / D) + 1e-5)                               # [B, h]
    for rows, o in per_rank:
        for j in range(rpt):
            r = rows[j]                                                      # [W, RG]
            col = hh[:, None, None] * D + r[None]                            # [h, W, RG]
            gate = inp["w_norm"].float()[r][None, None] * sig(inp["g_out"].float()[:, col])
            # lane k_lane == j % TPR stores; every lane of the row holds the same o
            val = o[:, :, j, :, :, j % tpr] * rstd[:, :, None, None] * gate
            o_out[:, col] = val.to(torch.bfloat16)
            o_writes[:, col] += 1
    got = {"o": o_out, "state": state_out, "conv_state": cs_out}
    writes = {"o": o_writes, "state": st_writes, "conv_state": cs_writes}
    return got, writes


CASES = [(p, tp, sd, bsz) for p in _points() for tp in (8, 16) for sd in ("fp32", "bf16") for bsz in (1, 3)]


@pytest.mark.parametrize("params,tp,state_dtype,bsz", CASES,
                         ids=[f"{json.dumps(c[0], sort_keys=True)}-tp{c[1]}-{c[2]}-b{c[3]}" for c in CASES])
def test_emulation_matches_reference(params, tp, state_dtype, bsz):
    defn = reference_impls.get("kda_decode")
    point = Point(batch=bsz, tp=tp, state_dtype=state_dtype)
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(7 + bsz), "cpu")
    ref = defn.run_reference(inputs)
    got, writes = emulate(inputs, params, tp)
    for name, cnt in writes.items():
        assert int(cnt.min()) == 1 and int(cnt.max()) == 1, f"{name}: every element written exactly once"
    res = compare(defn, got, ref, inputs)
    assert res.ok, res.summary()


def test_points_exist_and_cover_both_layouts():
    pts = _points()
    assert len(pts) >= 2
    assert any(p["v_split"] == 1 for p in pts) and any(p["v_split"] > 1 for p in pts)
