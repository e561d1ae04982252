"""The add_rmsnorm cluster families: a row split over a cluster of CS CTAs, reduced through DSMEM.
clusterrow pulls (CTA barrier, warp 0 sums the warps, cluster barrier, every CTA loads the peers'
partials, exit barrier); clusterpush pushes (lane 0 of every warp stores its sum into every CTA,
one cluster barrier, local sums in (rank, warp) order).

CPU: a torch emulation of each committed candidate's exact partition (from the rendered module:
CS, THREADS, VEC, SV, NV, vector_of) and its family's reduction order against the op reference
(harness.compare); every feasible point of each space owns each column exactly once; the push
kernel compiles to one cluster barrier, CS pushes and no peer loads.
GPU (-m gpu): each candidate against the reference at B = 1, 3, 64."""
from __future__ import annotations

import json

import pytest
import torch

from kernel_helpers import ROOT, compiled_ptx, family_candidates, load_module, sync_counts

H, EPS = 7168, 1e-5
FAMILIES = ("clusterrow", "clusterpush")


def _candidates(*families: str) -> list[str]:
    return family_candidates("add_rmsnorm", *(families or FAMILIES))


def _family(cid: str) -> str:
    meta = json.loads((ROOT / "kernels_generated/add_rmsnorm" / cid / "candidate.json").read_text())
    return meta["provenance"]["template"]["family"]


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/add_rmsnorm" / cid / "kernel.py", f"add_rmsnorm_cr_{cid}")


def _columns(m) -> torch.Tensor:
    """[CS, THREADS, NV, VEC] column owned by (rank, thread, vector k, element)."""
    vix = torch.tensor([[[m.vector_of(r, k, t) for k in range(m.NV)] for t in range(m.THREADS)]
                        for r in range(m.CS)])
    return vix[..., None] * m.VEC + torch.arange(m.VEC)


@pytest.mark.parametrize("family", FAMILIES)
def test_there_are_committed_candidates(family):
    assert _candidates(family)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_feasible_point_owns_each_column_once(family):
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/add_rmsnorm/{family}.py.j2", "add_rmsnorm")
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
    tot = torch.zeros(lanes.shape[0])
    if _family(cid) == "clusterpush":
        for q in range(m.CS):                                            # slots in (rank, warp) order
            for w in range(m.NWARPS):
                tot = tot + lanes[:, q, w, 0]
    else:
        cta = torch.zeros(lanes.shape[:2])
        for w in range(m.NWARPS):                                        # warps in order
            cta = cta + lanes[..., w, 0]
        for q in range(m.CS):                                            # rank order
            tot = tot + cta[:, q]
    rstd = torch.rsqrt(tot / H + EPS)
    out = (h * rstd[:, None] * inp["weight"].float()).to(torch.bfloat16)
    res = compare(defn, {"out": out, "residual_out": r}, defn.run_reference(inp), inp)
    assert res.ok, res.summary()


@pytest.mark.parametrize("cid", _candidates("clusterpush"))
def test_push_compiles_to_one_barrier_and_no_peer_loads(cid, tmp_path):
    out = sync_counts(compiled_ptx(ROOT / "kernels_generated/add_rmsnorm" / cid / "kernel.py", tmp_path))
    assert (out["arrive"], out["wait"], out["bar_sync"], out["ld_cluster"]) == (1, 1, 0, 0), out
    assert out["st_cluster"] == _module(cid).CS, out


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
