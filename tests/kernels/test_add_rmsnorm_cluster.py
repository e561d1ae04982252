"""The add_rmsnorm cluster families: a row split over a cluster of CS CTAs, reduced through DSMEM.
clusterrow pulls (CTA barrier, warp 0 sums the warps, cluster barrier, every CTA loads the peers'
partials, exit barrier); clusterpush pushes (lane 0 of every warp stores its sum into every CTA,
one cluster barrier, local sums in (rank, warp) order); pushhybrid runs two such plans behind one
callable, by batch (a plan of CS = 1 stores its warp sums locally behind one CTA barrier).

CPU: a torch emulation of each committed candidate's exact partition (from the rendered module:
each plan's CS, THREADS, VEC, SV, NV, vector_of) and its family's reduction order against the op
reference (harness.compare); every feasible point of each space owns each column exactly once;
the push kernels compile to one barrier each, CS pushes and no peer loads; pushhybrid's plan
choice switches at B_SWITCH.
GPU (-m gpu): each candidate against the reference at B = 1, 3, 64 (pushhybrid: and both sides
of its switch)."""
from __future__ import annotations

import json
import re

import pytest
import torch

from kernel_helpers import ROOT, compiled_ptx, family_candidates, load_module, sync_counts

H, EPS = 7168, 1e-5
FAMILIES = ("clusterrow", "clusterpush", "pushhybrid")


class _Plan:
    """One launch plan of a rendered module: (CS, THREADS, NV, NWARPS, VEC, vector_of)."""

    def __init__(self, cs: int, threads: int, nv: int, vec: int, vector_of, ordered_sum=None):
        self.CS, self.THREADS, self.NV, self.VEC, self.vector_of = cs, threads, nv, vec, vector_of
        self.NWARPS = threads // 32
        self.ordered_sum = ordered_sum or (lambda vals: sum(vals[1:], vals[0]))   # left to right


def _plans(m) -> list[_Plan]:
    """The plans a module launches: pushhybrid's SMALL and LARGE, else the module's one."""
    if hasattr(m, "SMALL"):
        return [_Plan(p.cs, p.threads, p.nv, m.VEC, p.vector_of, m.ordered_sum) for p in (m.SMALL, m.LARGE)]
    return [_Plan(m.CS, m.THREADS, m.NV, m.VEC, m.vector_of)]


def _candidates(*families: str) -> list[str]:
    return family_candidates("add_rmsnorm", *(families or FAMILIES))


def _family(cid: str) -> str:
    meta = json.loads((ROOT / "kernels_generated/add_rmsnorm" / cid / "candidate.json").read_text())
    return meta["provenance"]["template"]["family"]


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/add_rmsnorm" / cid / "kernel.py", f"add_rmsnorm_cr_{cid}")


def _columns(m: _Plan) -> torch.Tensor:
    """[CS, THREADS, NV, VEC] column owned by (rank, thread, vector k, element)."""
    vix = torch.tensor([[[m.vector_of(r, k, t) for k in range(m.NV)] for t in range(m.THREADS)]
                        for r in range(m.CS)])
    return vix[..., None] * m.VEC + torch.arange(m.VEC)


@pytest.mark.parametrize("family", FAMILIES)
def test_there_are_committed_candidates(family):
    assert _candidates(family)


@pytest.mark.parametrize("family", ("clusterrow", "clusterpush"))
def test_every_feasible_point_owns_each_column_once(family):
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/add_rmsnorm/{family}.py.j2", "add_rmsnorm")
    for c in fam.configs():
        sv = H // (c["cs"] * c["vec"])
        nv = sv // c["threads"]
        cols = sorted(((r * sv + k * c["threads"] + t) * c["vec"] + e) for r in range(c["cs"])
                      for k in range(nv) for t in range(c["threads"]) for e in range(c["vec"]))
        assert cols == list(range(H)), c


def test_every_pushhybrid_point_owns_each_column_once_in_both_plans(tmp_path):
    from kernel_helpers import rendered_points

    points = rendered_points("add_rmsnorm", "pushhybrid", tmp_path)
    assert len(points) > 20
    for params, m in points:
        small, large = _plans(m)
        assert (small.CS, small.THREADS, large.CS, large.THREADS) == (
            params["small_cs"], params["small_threads"], params["large_cs"], params["large_threads"])
        for plan in (small, large):
            assert sorted(_columns(plan).flatten().tolist()) == list(range(H)), params


class _Term:
    """A number stand-in whose '+' records the expression: ordered_sum's order, made visible."""

    def __init__(self, expr):
        self.expr = expr

    def __add__(self, other: "_Term") -> "_Term":
        return _Term((self.expr, other.expr))


def test_pushhybrid_ordered_sum_is_a_pairwise_tree_or_left_to_right(tmp_path):
    from kernel_helpers import rendered_points

    by_tree = {params["tree_sum"]: m for params, m in rendered_points("add_rmsnorm", "pushhybrid", tmp_path)}
    assert set(by_tree) == {False, True}
    terms = [_Term(i) for i in range(7)]
    assert by_tree[False].ordered_sum(terms).expr == ((((((0, 1), 2), 3), 4), 5), 6)
    assert by_tree[True].ordered_sum(terms).expr == (((0, 1), (2, 3)), ((4, 5), 6))
    assert by_tree[True].ordered_sum(terms[:1]).expr == 0


@pytest.mark.parametrize("cid", _candidates("pushhybrid"))
def test_pushhybrid_switches_plan_at_b_switch(cid):
    m = _module(cid)
    assert m.plan_for(1) == m.plan_for(m.B_SWITCH) == m.SMALL
    assert m.plan_for(m.B_SWITCH + 1) == m.plan_for(64) == m.LARGE
    launched = []
    by_batch = m.ByBatch({m.SMALL: lambda *a: launched.append("small"), m.LARGE: lambda *a: launched.append("large")})
    for batch in (1, m.B_SWITCH, m.B_SWITCH + 1, 64):
        by_batch(torch.zeros(batch, H), None, None, None, None)
    assert launched == ["small", "small", "large", "large"]


@pytest.mark.parametrize("cid", _candidates())
def test_emulation_matches_reference(cid):
    for plan in _plans(_module(cid)):
        _check_emulation(cid, plan)


def _check_emulation(cid: str, m: _Plan) -> None:
    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

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
    if _family(cid) in ("clusterpush", "pushhybrid"):                    # slots in (rank, warp) order
        tot = m.ordered_sum([lanes[:, q, w, 0] for q in range(m.CS) for w in range(m.NWARPS)])
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


@pytest.mark.parametrize("cid", _candidates("clusterpush", "pushhybrid"))
def test_push_compiles_to_one_barrier_and_no_peer_loads(cid, tmp_path):
    """Each plan: CS > 1 one cluster barrier and CS pushes (with ASYNC_PUSH: one relaxed arrive and
    its wait, one st.async per warp, pushed by CS lanes at once); CS = 1 one CTA barrier (summed
    over the plans a module compiles)."""
    ptx = compiled_ptx(ROOT / "kernels_generated/add_rmsnorm" / cid / "kernel.py", tmp_path)
    out = sync_counts(ptx)
    plans = _plans(_module(cid))
    clustered = [p for p in plans if p.CS > 1]
    assert (out["arrive"], out["wait"], out["ld_cluster"]) == (len(clustered), len(clustered), 0), out
    assert out["bar_sync"] == len(plans) - len(clustered), out
    if getattr(_module(cid), "ASYNC_PUSH", False):
        assert len(re.findall(r"barrier\.cluster\.arrive\.relaxed", ptx)) == len(clustered), out
        assert len(re.findall(r"st\.async\.shared::cluster", ptx)) == len(clustered), out
        assert out["st_cluster"] == 0, out
    else:
        assert out["st_cluster"] == sum(p.CS for p in clustered), out
    if _family(cid) == "pushhybrid":                                     # x and residual: 2 NV loads a plan
        evict_first = len(re.findall(r"ld\.global\.L1::evict_first", ptx))
        assert evict_first == (sum(2 * p.NV for p in plans) if _module(cid).EVICT_FIRST else 0), evict_first


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
    batches = [1, 3, 64] + ([m.B_SWITCH, m.B_SWITCH + 1] if hasattr(m, "B_SWITCH") else [])
    for batch in batches:
        point = Point(batch=batch, tp=8)
        inp = defn.make_inputs(point, torch.Generator().manual_seed(50 + batch), "cuda")
        outs = defn.alloc_outputs(point, "cuda", poison=True)
        m.launch(compiled, **inp, **outs)
        torch.cuda.synchronize()
        res = compare(defn, outs, defn.run_reference(inp), inp)
        assert res.ok, f"{cid} B={batch}: {res.summary()}"
