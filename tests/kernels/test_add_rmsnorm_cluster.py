"""The add_rmsnorm clusterrow family (a row split over a cluster of CS CTAs, DSMEM reduction).

CPU: a torch emulation of each committed candidate's exact partition (from the rendered module:
CS, THREADS, VEC, SV, NV, vector_of) and reduction order - per thread over its vectors k in order,
the 5-step warp butterfly, warps in order into the CTA partial, CTA partials in rank order - against
the op reference (harness.compare); every feasible point of the space owns each column exactly once.
GPU (-m gpu): each candidate against the reference at B = 1, 3, 64."""
from __future__ import annotations

import pytest
import torch

from kernel_helpers import ROOT, family_candidates, load_module

H, EPS = 7168, 1e-5
FAMILY = "clusterrow"


def _candidates() -> list[str]:
    return family_candidates("add_rmsnorm", FAMILY)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/add_rmsnorm" / cid / "kernel.py", f"add_rmsnorm_cr_{cid}")


def _columns(m) -> torch.Tensor:
    """[CS, THREADS, NV, VEC] column owned by (rank, thread, vector k, element)."""
    vix = torch.tensor([[[m.vector_of(r, k, t) for k in range(m.NV)] for t in range(m.THREADS)]
                        for r in range(m.CS)])
    return vix[..., None] * m.VEC + torch.arange(m.VEC)


def test_there_are_committed_candidates():
    assert _candidates()


def test_every_feasible_point_owns_each_column_once():
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/add_rmsnorm/{FAMILY}.py.j2", "add_rmsnorm")
    for c in fam.configs():
        sv = H // (c["cs"] * c["vec"])
        nv = sv // c["threads"]
        cols = sorted(((r * sv + k * c["threads"] + t) * c["vec"] + e) for r in range(c["cs"])
                      for k in range(nv) for t in range(c["threads"]) for e in range(c["vec"]))
        assert cols == list(range(H)), c


@pytest.mark.parametrize("cid", _candidates())
def test_emulation_matches_reference(cid):
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    m = _module(cid)
    col = _columns(m)
    assert sorted(col.flatten().tolist()) == list(range(H))
    defn = reference_impls.get("add_rmsnorm")
    inp = defn.make_inputs(Point(batch=3, tp=8), torch.Generator().manual_seed(7))
    r = (inp["x"].float() + inp["residual"].float()).to(torch.bfloat16)
    h = r.float()
    sq = h * h                                                           # [B, H]
    per_vec = sq[:, col].sum(-1)                                         # [B, CS, T, NV]: one vector's reduce
    thr = torch.zeros(per_vec.shape[:-1])
    for k in range(m.NV):                                                # ss += reduce(vector k)
        thr = thr + per_vec[..., k]
    lanes = thr.unflatten(-1, (m.NWARPS, 32))                            # [B, CS, NWARPS, 32]
    for off in (16, 8, 4, 2, 1):                                         # shfl.bfly
        lanes = lanes + lanes[..., torch.arange(32) ^ off]
    cta = torch.zeros(lanes.shape[:2])
    for w in range(m.NWARPS):                                            # warps in order
        cta = cta + lanes[..., w, 0]
    tot = torch.zeros(cta.shape[0])
    for q in range(m.CS):                                                # rank order
        tot = tot + cta[:, q]
    rstd = torch.rsqrt(tot / H + EPS)
    out = (h * rstd[:, None] * inp["weight"].float()).to(torch.bfloat16)
    res = compare(defn, {"out": out, "residual_out": r}, defn.run_reference(inp), inp)
    assert res.ok, res.summary()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_matches_reference(cid):
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    m = _module(cid)
    defn = reference_impls.get("add_rmsnorm")
    compiled = m.compile(8, "--enable-tvm-ffi")
    for batch in (1, 3, 64):
        point = Point(batch=batch, tp=8)
        inp = defn.make_inputs(point, torch.Generator().manual_seed(50 + batch), "cuda")
        outs = defn.alloc_outputs(point, "cuda", poison=True)
        m.launch(compiled, **inp, **outs)
        torch.cuda.synchronize()
        res = compare(defn, outs, defn.run_reference(inp), inp)
        assert res.ok, f"{cid} B={batch}: {res.summary()}"
