"""The attn_res clustergram family (reductions pushed through DSMEM ahead of one cluster barrier;
rounds=1: one round, Gram matrix + dots; rounds=2: (sumsq, dot) per source, then the mix's sumsq).

CPU: a torch emulation of each human candidate's exact partition (CS, THREADS, VEC, SV, NV, ROUNDS
from the rendered module) and reduction order - per thread over its vectors k in order, the halving
butterfly lane by lane (which lane keeps which half, which lane ends with which totals), the pushed
slots summed in (rank, warp) order, the logits and softmax as every lane forms them, then the Gram
quadratic form (rounds=1) or the second pushed round (rounds=2) - against the op reference
(harness.compare) at NB = 1, 3, 8, also on inputs whose mix cancels its sources 100-fold (the case
the Gram identity loses precision in). Every feasible point owns each column once; the compile
emits ROUNDS cluster barriers (CTA barriers at CS = 1), pushes (st.shared::cluster), the planned
shuffles, and no peer loads.
GPU (-m gpu): each candidate on the decoder's strided view (rows past nb NaN) and on compact blocks."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from kernel_helpers import ROOT, attn_res_owner, check_attn_res_on_strided_blocks, family_candidates, load_module

H, EPS = 7168, 1e-5
FAMILY = "clustergram"


def _candidates() -> list[str]:
    return family_candidates("attn_res", FAMILY)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/attn_res" / cid / "kernel.py", f"attn_res_cg_{cid}")


def _halving_butterfly(vals: torch.Tensor, halvings: int) -> torch.Tensor:
    """[..., 32, P] per-lane values -> [..., 32, 2]: the kernel's shuffles step by step in fp32.
    At offset `off` a halving step keeps the upper half in lanes with bit `off` set (the lower half
    elsewhere) and adds the partner's copy of the kept half; later offsets are plain butterflies."""
    lanes = torch.arange(32)
    for h in range(5):
        off = 16 >> h
        partner = lanes ^ off
        if h < halvings:
            half = vals.shape[-1] // 2
            lo, hi = vals[..., :half], vals[..., half:]
            upper = ((lanes & off) != 0)[:, None]
            keep = torch.where(upper, hi, lo)
            send = torch.where(upper, lo, hi)
            vals = keep + send[..., partner, :]
        else:
            vals = vals + vals[..., partner, :]
    return vals


def _emulate(mod, inp: dict, nb: int) -> dict[str, torch.Tensor]:
    ns = nb + 1
    pairs = mod.gram_pairs(ns)
    ng, nval = len(pairs), len(pairs) + ns
    p_pad, halvings = mod.butterfly_plan(nval)
    shift = 5 - halvings
    col, live = attn_res_owner(mod.CS, mod.THREADS, mod.VEC)
    new_prefix = (inp["prefix"].float() + inp["delta"].float()).to(torch.bfloat16).float()
    v = torch.cat([inp["blocks"].float(), new_prefix[:, None]], dim=1)          # [B, NS, H]
    wr = inp["w_res"].float()
    per_col = [v[:, a] * v[:, b] for a, b in pairs] + [v[:, j] * wr for j in range(ns)]
    per_col = torch.stack(per_col + [torch.zeros_like(v[:, 0])] * (p_pad - nval), dim=-2)  # [B, P, H]
    gathered = per_col[..., col] * live[..., None]                             # [B, P, CS, T, NV, VEC]
    thr = torch.zeros(gathered.shape[:-2])
    for k in range(mod.NV):                                                     # vals[g] += reduce(vector k)
        thr = thr + gathered[..., k, :].sum(-1)
    lanes = thr.unflatten(-1, (mod.NWARPS, 32)).movedim(1, -1)                 # [B, CS, NWARPS, 32, P]
    red = _halving_butterfly(lanes, halvings)                                   # [B, CS, NWARPS, 32, 2]
    warp_tot = torch.zeros(lanes.shape[:-2] + (nval,))
    for i in range(nval):                                                       # pushed by lane (i // 2) << SHIFT
        warp_tot[..., i] = red[..., (i // 2) << shift, i % 2]
        holders = [lane for lane in range(32) if lane >> shift == i // 2]   # every lane of the group agrees
        assert all(torch.equal(red[..., lane, i % 2], warp_tot[..., i]) for lane in holders)
    slots = warp_tot.flatten(1, 2)                                              # [B, CS * NWARPS, NVAL], (rank, warp)
    allv = torch.zeros(slots.shape[0], nval)
    for s in range(slots.shape[1]):
        allv = allv + slots[:, s]
    gidx = {pr: g for g, pr in enumerate(pairs)}
    logit = torch.stack([allv[:, ng + j] * torch.rsqrt(allv[:, gidx[(j, j)]] * (1.0 / H) + EPS) for j in range(ns)], -1)
    e = torch.exp2((logit - logit.amax(-1, keepdim=True)) * (1.0 / math.log(2.0)))
    p = e / e.sum(-1, keepdim=True)
    mixed = v[:, nb] * p[:, nb, None]
    for j in range(nb):
        mixed = mixed + v[:, j] * p[:, j, None]
    if mod.ROUNDS == 1:
        q = torch.zeros(allv.shape[0])
        for g, (a, b) in enumerate(pairs):
            q = q + p[:, a] * p[:, b] * (1.0 if a == b else 2.0) * allv[:, g]
    else:                                                                       # round 2: plain butterfly, lane 0 pushes
        sq = (mixed * mixed)[:, col] * live[..., None]                         # [B, CS, T, NV, VEC]
        thr2 = torch.zeros(sq.shape[:-2])
        for k in range(mod.NV):
            thr2 = thr2 + sq[..., k, :].sum(-1)
        lanes2 = thr2.unflatten(-1, (mod.NWARPS, 32))                          # [B, CS, NWARPS, 32]
        for h in range(5):
            lanes2 = lanes2 + lanes2[..., torch.arange(32) ^ (16 >> h)]
        q = torch.zeros(allv.shape[0])
        for s2 in lanes2[..., 0].flatten(1, 2).unbind(-1):                     # slots in (rank, warp) order
            q = q + s2
    rstd = torch.rsqrt(q.clamp_min(0) * (1.0 / H) + EPS)[:, None]
    return {"out": (mixed * rstd * inp["w_norm"].float()).to(torch.bfloat16), "new_prefix": new_prefix.to(torch.bfloat16)}


def _by_rounds(rounds: int):
    return next(m for m in map(_module, _candidates()) if m.ROUNDS == rounds)


def test_gram_pairs_and_butterfly_plan():
    assert {_module(c).ROUNDS for c in _candidates()} == {1, 2}
    mod = _by_rounds(1)
    assert mod.gram_pairs(2) == [(0, 0), (0, 1), (1, 1)]
    assert len(mod.gram_pairs(9)) == 45
    assert _by_rounds(2).gram_pairs(3) == [(0, 0), (1, 1), (2, 2)]
    assert mod.butterfly_plan(5) == (8, 2)        # nb1: 3 Gram + 2 dots
    assert mod.butterfly_plan(54) == (64, 5)      # nb8: 45 + 9, every offset halves
    assert mod.butterfly_plan(2) == (2, 0)
    with pytest.raises(AssertionError):
        mod.butterfly_plan(65)


@pytest.mark.parametrize("halvings", [0, 2, 5])
def test_halving_butterfly_leaves_each_lane_its_totals(halvings):
    p_pad = 2 << halvings
    vals = torch.randn(32, p_pad, dtype=torch.float64)
    red = _halving_butterfly(vals, halvings)
    shift = 5 - halvings
    for lane in range(32):
        for e in range(2):
            assert torch.allclose(red[lane, e], vals[:, 2 * (lane >> shift) + e].sum())


def test_every_feasible_point_owns_each_column_once():
    from harness.agent.families import load_family

    fam = load_family(ROOT / "prompts/kernels/attn_res" / f"{FAMILY}.py.j2", "attn_res")
    cfgs = fam.configs()
    assert {c["cs"] for c in cfgs} == {1, 2, 4, 8}
    for c in cfgs:
        col, live = attn_res_owner(c["cs"], c["threads"], c["vec"])
        assert torch.equal(col[live].flatten().sort().values, torch.arange(H)), c
        assert ((~live.any(-1)).sum(-1) < 32).all(), c                  # no warp without a live vector


@pytest.mark.parametrize("nb", [1, 3, 8])
@pytest.mark.parametrize("cid", _candidates())
def test_emulation_matches_reference(cid, nb):
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    mod = _module(cid)
    defn = reference_impls.get("attn_res")
    inp = defn.make_inputs(Point(batch=3, tp=8, shape=f"nb{nb}"), torch.Generator().manual_seed(31 + nb))
    res = compare(defn, _emulate(mod, inp, nb), defn.reference(**inp), inp)
    assert res.ok, res.summary()


@pytest.mark.parametrize("cid", _candidates())
def test_emulation_holds_when_the_mix_cancels_its_sources(cid):
    """blocks = [x, -x + x/100]: with p near 1/2 each the mix is ~x/200 while each source is ~x,
    so p^T G p is a difference of terms 40000x larger than itself in fp32."""
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    mod = _module(cid)
    defn = reference_impls.get("attn_res")
    inp = defn.make_inputs(Point(batch=4, tp=8, shape="nb2"), torch.Generator().manual_seed(5))
    x = inp["blocks"][:, 0].float()
    inp["blocks"] = torch.stack([x, -x + x / 100], dim=1).to(torch.bfloat16)
    inp["prefix"] = torch.zeros_like(inp["prefix"])
    inp["delta"] = torch.zeros_like(inp["delta"])
    inp["w_res"] = torch.zeros_like(inp["w_res"])                       # equal logits: p = 1/3 each
    ref = defn.reference(**inp)
    res = compare(defn, _emulate(mod, inp, 2), ref, inp)
    assert res.ok, res.summary()


PROBE = r"""
import importlib.util, json, os, re, sys, pathlib, tempfile
os.environ["CUTE_DSL_ARCH"] = sys.argv[1]
os.environ["CUTE_DSL_KEEP"] = "ptx"
dump = tempfile.mkdtemp(prefix="cg-probe-")
os.environ["CUTE_DSL_DUMP_DIR"] = dump
spec = importlib.util.spec_from_file_location("cg_kernel", sys.argv[2])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
mod.compile(8, "--enable-tvm-ffi", shape="nb8")
ptx = "\n".join(p.read_text() for p in pathlib.Path(dump).rglob("*.ptx"))
count = lambda pat: len(re.findall(pat, ptx))
print(json.dumps({"arrive": count(r"barrier\.cluster\.arrive"), "wait": count(r"barrier\.cluster\.wait"),
                  "bar_sync": count(r"\bbar\.sync|\bbarrier\.sync"), "st_cluster": count(r"st\.shared::cluster\.f32"),
                  "ld_cluster": count(r"ld\.shared::cluster"), "bfly": count(r"shfl\.sync\.bfly"),
                  "ld_global": sorted(set(re.findall(r"ld\.global\S*", ptx))), "cs": mod.CS, "rounds": mod.ROUNDS,
                  "plan": mod.butterfly_plan(len(mod.gram_pairs(9)) + 9)}))
"""


@pytest.mark.parametrize("cid", _candidates())
def test_nb8_compiles_to_one_barrier_and_pushes(cid):
    path = ROOT / "kernels_generated/attn_res" / cid / "kernel.py"
    res = subprocess.run([sys.executable, "-c", PROBE, "sm_90a", str(path)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    cs, rounds = out["cs"], out["rounds"]
    if cs > 1:
        assert (out["arrive"], out["wait"], out["bar_sync"]) == (rounds, rounds, 0), out
        # round 1: two totals per pushing lane; round 2: one; each to every CTA
        assert out["st_cluster"] == (2 + (rounds - 1)) * cs, out
    else:
        assert (out["arrive"], out["wait"], out["bar_sync"]) == (0, 0, rounds), out
        assert out["st_cluster"] == 0, out
    assert out["ld_cluster"] == 0, out                              # never a peer's shared memory read
    p_pad, halvings = out["plan"]                                   # nb8: 54 values (rounds 1) or 18 (rounds 2)
    plan_shuffles = sum(p_pad >> (h + 1) for h in range(halvings)) + 2 * (5 - halvings)
    assert out["bfly"] == plan_shuffles + 5 * (rounds - 1), out
    assert (p_pad, halvings) == ((64, 5) if rounds == 1 else (32, 4)), out
    assert out["ld_global"] == ["ld.global.v4.b32"], out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_strided_blocks_match_the_reference(cid):
    """Each nb kernel on the decoder's strided view (rows nb..7 of the [B, 8, H] buffer NaN) and on
    compact blocks, at B = 1, 5 and 64, against the reference (harness.compare)."""
    check_attn_res_on_strided_blocks(_module(cid), cid, nbs=(1, 2, 5, 8), batches=(1, 5, 64),
                                     seed=lambda nb, batch: 100 * nb + batch + 7)
