"""The mma_hybrid moe_router family: two compiled paths behind one launch, chosen by batch
(B <= B_SWITCH: mma_ctatopk_merge's K-split GEMM; above: mma_rowsplit's GEMM), the same top-k
(emulated in test_moe_router_ctatopk.py for both GEMMs' split counts).

CPU: the dispatcher picks the path by B at the switch's both sides and hands each path a
workspace of its own split count (and, under topk_wait=flag, counters of its own); every feasible
point renders both GEMMs' constants; the PTX of a flag candidate publishes each GEMM CTA's
partials with a release add and polls them with acquire loads, without griddepcontrol.wait.
GPU (-m gpu): each committed candidate against the reference at B = 1..64 in an order that
crosses the switch back and forth, back to back without a sync, and in CUDA graphs of both paths;
a flag candidate's counters are zero after every sequence."""
from __future__ import annotations

import re

import pytest
import torch

from kernel_helpers import (ROOT, check_router_back_to_back, check_router_calls, check_router_graph, compiled_ptx,
                            family_candidates, load_module, rendered_points, template_params)

FAMILY = "mma_hybrid"


def _candidates() -> list[str]:
    return family_candidates("moe_router", FAMILY)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", f"router_hybrid_{cid}")


def _flag(cid: str) -> bool:
    return template_params("moe_router", cid).get("topk_wait", "grid") == "flag"


def _assert_counters_zero(mod, cid: str) -> None:
    """After a synchronised sequence of calls, every path's counters were reset by its last top-k CTA."""
    if _flag(cid):
        for large in (False, True):
            assert mod.counters(torch.device("cuda"), large).tolist() == [0, 0], (cid, large)


def test_there_are_committed_candidates():
    assert _candidates()


@pytest.mark.parametrize("cid", _candidates())
def test_dispatch_by_batch_with_a_workspace_per_path(cid, monkeypatch):
    m = _module(cid)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)     # CPU tensors: no CUDA query
    calls = []

    def path(name):
        def call(x, w, bias, ws, *rest):
            calls.append((name, x.shape[0], tuple(ws.shape)))
            if _flag(cid):                          # rest = (counters, tw, ids)
                cnt = rest[0]
                assert len(rest) == 3 and cnt.dtype == torch.int32 and cnt.tolist() == [0, 0]
                assert cnt is m.counters(dev, name == "large") and cnt is not m.counters(dev, name != "large")
            else:
                assert len(rest) == 2
        return call

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
    if _flag(cid):
        m.launch(disp, torch.zeros(0, m.H, dtype=torch.bfloat16), None, None, None, None)
        assert len(calls) == 5                                                 # B=0 launches nothing


def test_there_is_a_committed_flag_candidate():
    assert any(_flag(c) for c in _candidates())


def _pick(flag: bool) -> list[str]:
    return [c for c in _candidates() if _flag(c) == flag][:1]


@pytest.mark.parametrize("cid", _pick(True) + _pick(False))
def test_flag_candidates_publish_partials_by_release_and_poll_by_acquire(cid, tmp_path):
    ptx = compiled_ptx(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", tmp_path)
    by_name: dict[str, list[str]] = {}                       # gemm, gemm_rs, topk (one per path)
    for body in re.split(r"\.entry ", ptx)[1:]:
        by_name.setdefault(re.match(r"kernel_cutlass_(\w+?)_kernel", body).group(1), []).append(body)
    assert sorted(by_name) == ["gemm", "gemm_rs", "topk"] and len(by_name["topk"]) == 2, sorted(by_name)
    for name, bodies in by_name.items():
        for body in bodies:
            counts = (len(re.findall(r"atom\.global\.release(\.gpu)?\.add", body)),
                      len(re.findall(r"ld\.acquire\.gpu\.global", body)),
                      len(re.findall(r"griddepcontrol\.wait", body)))
            if not _flag(cid):
                assert counts == (0, 0, 1 if name == "topk" else 0), (cid, name, counts)
            elif name == "topk":
                assert counts[0] == 0 and counts[1] >= 1 and counts[2] == 0, (cid, name, counts)
            else:
                assert counts == (1, 0, 0), (cid, name, counts)


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
    _assert_counters_zero(mod, cid)
    check_router_back_to_back(mod, compiled, order * 2, 9000, cid)     # PDL overlaps the calls
    _assert_counters_zero(mod, cid)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates()[:1] + [c for c in _candidates() if _flag(c)][:1])
def test_gpu_cuda_graph_replay_of_both_paths(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")
    for batch in (mod.B_SWITCH, mod.B_SWITCH + 1):
        check_router_graph(mod, compiled, batch, 10000 + batch, f"{cid} graph B={batch}", replays=10)
        _assert_counters_zero(mod, cid)
