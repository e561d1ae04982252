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

from kernel_helpers import (ROOT, check_router_back_to_back, check_router_calls, check_router_graph, family_candidates,
                            load_module, rendered_points)

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
    points = rendered_points("moe_router", FAMILY, tmp_path)
    assert points
    for c, m in points:
        assert m.N_BLOCKS * m.ROWS_CTA == m.E and m.RS_N_BLOCKS * m.RS_ROWS_CTA == m.E, c
        assert m.RS_CTA_SPLITS * m.RS_K_C == m.H and (m.RS_X_STRIDE * 2) % 128 == 64, c
        assert 1 <= m.B_SWITCH < m.B_MAX and m.TOPK_MERGE and m.TOPK_BALLOT, c


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_matches_reference_across_the_switch(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")
    sw = mod.B_SWITCH
    order = (1, sw, sw + 1, 64, 2, sw + 1, sw, 33, 17, 64, 5, 63, 8)
    check_router_calls(mod, compiled, order, 8000, cid)
    check_router_back_to_back(mod, compiled, order * 2, 9000, cid)     # PDL overlaps the calls


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates()[:1])
def test_gpu_cuda_graph_replay_of_both_paths(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")
    for batch in (mod.B_SWITCH, mod.B_SWITCH + 1):
        check_router_graph(mod, compiled, batch, 10000 + batch, f"{cid} graph B={batch}", replays=10)
