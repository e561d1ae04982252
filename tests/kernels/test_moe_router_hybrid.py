"""The mma_hybrid moe_router family: two compiled paths behind one launch, chosen by batch
(B <= B_SWITCH: mma_ctatopk_merge's K-split GEMM; above: mma_rowsplit's GEMM), the same top-k
(emulated in test_moe_router_ctatopk.py for both GEMMs' split counts).

CPU: the dispatcher picks the path by B at the switch's both sides and hands each path a
workspace of its own split count; every feasible point renders both GEMMs' constants.
GPU (-m gpu): each committed candidate against the reference at B = 1..64 in an order that
crosses the switch back and forth, back to back without a sync, and in CUDA graphs of both paths."""
from __future__ import annotations

import pytest
import torch

from kernel_helpers import ROOT, family_candidates, load_module

FAMILY = "mma_hybrid"


def _candidates() -> list[str]:
    return family_candidates("moe_router", FAMILY)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", f"router_hybrid_{cid}")


def test_there_are_committed_candidates():
    assert _candidates()


@pytest.mark.parametrize("cid", _candidates())
def test_dispatch_by_batch_with_a_workspace_per_path(cid, monkeypatch):
    m = _module(cid)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)     # CPU tensors: no CUDA query
    calls = []

    def path(name):
        return lambda x, w, bias, ws, tw, ids: calls.append((name, x.shape[0], tuple(ws.shape)))

    disp = m.ByBatch(path("small"), path("large"))
    dev = torch.device("cpu")
    for b in (1, m.B_SWITCH, m.B_SWITCH + 1, 64, 2):
        x = torch.zeros(b, m.H, dtype=torch.bfloat16)
        m.launch(disp, x.to(dev), None, None, None, None)
    small, large = (m.CTA_SPLITS, m.B_MAX, m.E), (m.RS_CTA_SPLITS, m.B_MAX, m.E)
    assert calls == [("small", 1, small), ("small", m.B_SWITCH, small), ("large", m.B_SWITCH + 1, large),
                     ("large", 64, large), ("small", 2, small)]
    assert m.workspace(dev, False) is m.workspace(dev, False)                  # cached per path
    assert m.workspace(dev, True).shape == large


def test_every_point_renders_both_gemms(tmp_path):
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/moe_router/{FAMILY}.py.j2", "moe_router")
    cfgs = fam.configs()
    assert cfgs
    for i, c in enumerate(cfgs):
        (tmp_path / f"p{i}.py").write_text(fam.render(c))
        m = load_module(tmp_path / f"p{i}.py", f"hybrid_point_{i}")
        assert m.N_BLOCKS * m.ROWS_CTA == m.E and m.RS_N_BLOCKS * m.RS_ROWS_CTA == m.E, c
        assert m.RS_CTA_SPLITS * m.RS_K_C == m.H and (m.RS_X_STRIDE * 2) % 128 == 64, c
        assert 1 <= m.B_SWITCH < m.B_MAX and m.TOPK_MERGE and m.TOPK_BALLOT, c


def _check(defn, outs, ref, inp, label):
    from harness.compare import compare

    res = compare(defn, outs, ref, inp)
    assert res.ok, f"{label}: {res.summary()}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_matches_reference_across_the_switch(cid):
    import reference_impls
    from harness.opdef import Point

    mod = _module(cid)
    defn = reference_impls.get("moe_router")
    compiled = mod.compile(8, "--enable-tvm-ffi")
    sw = mod.B_SWITCH
    order = (1, sw, sw + 1, 64, 2, sw + 1, sw, 33, 17, 64, 5, 63, 8)
    for i, batch in enumerate(order):
        point = Point(batch=batch, tp=8)
        inp = defn.make_inputs(point, torch.Generator().manual_seed(8000 + i), "cuda")
        outs = defn.alloc_outputs(point, "cuda", poison=True)
        mod.launch(compiled, **inp, **outs)
        torch.cuda.synchronize()
        _check(defn, outs, defn.run_reference(inp), inp, f"{cid} call {i} B={batch}")
    runs = []                                       # back to back: PDL overlaps the calls
    for i, batch in enumerate(order * 2):
        point = Point(batch=batch, tp=8)
        runs.append((defn.make_inputs(point, torch.Generator().manual_seed(9000 + i), "cuda"),
                     defn.alloc_outputs(point, "cuda", poison=True), batch))
    for inp, outs, _ in runs:
        mod.launch(compiled, **inp, **outs)
    torch.cuda.synchronize()
    for i, (inp, outs, batch) in enumerate(runs):
        _check(defn, outs, defn.run_reference(inp), inp, f"{cid} back-to-back {i} B={batch}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates()[:1])
def test_gpu_cuda_graph_replay_of_both_paths(cid):
    import reference_impls
    from harness.opdef import Point

    mod = _module(cid)
    defn = reference_impls.get("moe_router")
    compiled = mod.compile(8, "--enable-tvm-ffi")
    for batch in (mod.B_SWITCH, mod.B_SWITCH + 1):
        point = Point(batch=batch, tp=8)
        sets = [defn.make_inputs(point, torch.Generator().manual_seed(10000 + batch + i), "cuda") for i in range(3)]
        outs = [defn.alloc_outputs(point, "cuda", poison=True) for _ in sets]
        mod.launch(compiled, **sets[0], **outs[0])      # eager first: the path's workspace exists before capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for inp, o in zip(sets, outs):
                mod.launch(compiled, **inp, **o)
        for _ in range(10):
            g.replay()
        torch.cuda.synchronize()
        for i, (inp, o) in enumerate(zip(sets, outs)):
            _check(defn, o, defn.run_reference(inp), inp, f"{cid} graph B={batch} call {i}")
