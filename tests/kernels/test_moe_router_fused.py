"""The mma_fused moe_router family: one kernel whose last B CTAs (by atomic ticket) wait for the
whole GEMM grid and then each do one token's top-16 (the top-k itself is emulated in
test_moe_router_ctatopk.py).

CPU: every feasible point keeps the grid small enough to be resident at once (a waiting CTA must
never hold the slot of a CTA that has not started) and has a ticket for every token; the
compiled PTX takes one acq_rel ticket, spins on acquire loads and, with pdl, issues every weight
load before griddepcontrol.wait; so does the GEMM of the mma_ctatopk_pf family (two kernels).
GPU (-m gpu): each committed candidate against the reference at B = 1..64 in a changing order,
the counters back at zero after every call; back-to-back calls without a sync (PDL overlap); a
CUDA graph of calls on rotating inputs replayed; mma_ctatopk_pf back to back."""
from __future__ import annotations

import re

import pytest
import torch

from kernel_helpers import (ROOT, check_router_back_to_back, check_router_calls, check_router_graph, compiled_ptx,
                            family_candidates, load_module)

FAMILY = "mma_fused"
PREFETCH = "mma_ctatopk_pf"    # two kernels, the GEMM's weight loads before griddepcontrol.wait
SMS_MIN = 132                  # H200; GB300 has more
RESIDENT_PER_SM = 2            # <= 128 threads x 255 registers fits twice in 64K registers


def _candidates(family: str = FAMILY) -> list[str]:
    return family_candidates("moe_router", family)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", f"router_fused_{cid}")


def test_there_are_committed_candidates():
    assert _candidates() and _candidates(PREFETCH)


def test_every_point_fits_resident_and_has_a_ticket_per_token():
    from harness.agent.families import load_family

    fam = load_family(ROOT / f"prompts/kernels/moe_router/{FAMILY}.py.j2", "moe_router")
    cfgs = fam.configs()
    assert cfgs
    for c in cfgs:
        n_ctas = (896 // (16 * c["m_tiles"])) * c["cta_splits"]
        assert 64 <= n_ctas <= SMS_MIN * RESIDENT_PER_SM, c
        assert 32 * c["warps"] <= 128, c


def _ptx(cid: str, tmp_path) -> dict:
    return {"pdl": _module(cid).PDL, "ptx": compiled_ptx(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", tmp_path)}


@pytest.mark.parametrize("cid", _candidates())
def test_ptx_has_the_ticket_protocol(cid, tmp_path):
    res = _ptx(cid, tmp_path)
    ptx = res["ptx"]
    assert len(re.findall(r"\.entry ", ptx)) == 1                       # one kernel
    assert len(re.findall(r"atom\.global\.acq_rel\.add\.u32\s+%r\d+, \[%rd\d+\], 1;", ptx)) == 2   # ticket, done
    assert re.search(r"atom\.global\.acquire\.add\.u32\s+%r\d+, \[%rd\d+\], 0;", ptx)             # the spin
    assert ptx.count("fence.acq_rel.gpu") >= 2
    if res["pdl"]:
        head = ptx.split("griddepcontrol.wait")[0]
        assert ptx.count("griddepcontrol.wait") == 1
        # every weight vector of the warp (KB * M_TILES * 2 of them) is loaded before the wait
        m = _module(cid)
        assert head.count("ld.global.v4.b32") == m.KB * m.M_TILES * 2
    else:
        assert "griddepcontrol.wait" not in ptx


@pytest.mark.parametrize("cid", _candidates(PREFETCH))
def test_prefetch_ptx_loads_weights_before_the_wait(cid, tmp_path):
    ptx = _ptx(cid, tmp_path)["ptx"]
    entries = re.split(r"\.entry ", ptx)[1:]
    assert len(entries) == 2
    gemm = next(e for e in entries if e.startswith("kernel_cutlass_gemm"))
    topk = next(e for e in entries if e.startswith("kernel_cutlass_topk"))
    m = _module(cid)
    assert gemm.count("griddepcontrol.wait") == 1
    assert gemm.split("griddepcontrol.wait")[0].count("ld.global.v4.b32") == m.KB * m.M_TILES * 2
    assert topk.index("griddepcontrol.launch_dependents") < topk.index("griddepcontrol.wait")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_matches_reference_and_leaves_the_counters_zero(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")

    def counters_zero(inp, batch):
        _, cnt = mod.workspace(inp["x"].device)
        assert cnt.tolist() == [0, 0, 0, 0], (cid, batch, cnt.tolist())

    check_router_calls(mod, compiled, (1, 2, 64, 5, 8, 17, 33, 1, 64, 3), 1000, cid, after_call=counters_zero)
    # back to back without a sync (with pdl the next call starts while this one finishes)
    inputs = check_router_back_to_back(mod, compiled, (64, 1, 64, 8, 64, 2) * 4, 2000, cid)
    assert mod.workspace(inputs[0]["x"].device)[1].tolist() == [0, 0, 0, 0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates(PREFETCH))
def test_gpu_prefetch_back_to_back(cid):
    """Calls without a sync: each GEMM may start while the call before is in its top-k."""
    mod = _module(cid)
    check_router_back_to_back(mod, mod.compile(8, "--enable-tvm-ffi"), (64, 1, 64, 8, 64, 2) * 4, 4000, cid)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_cuda_graph_replay(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")
    inputs = check_router_graph(mod, compiled, 8, 3000, f"{cid} graph", replays=20)
    assert mod.workspace(inputs[0]["x"].device)[1].tolist() == [0, 0, 0, 0]
