"""The mma_rowsplit moe_router family: mma_ctatopk's top-k kernel (emulated in
test_moe_router_ctatopk.py) after a GEMM whose warps split the CTA's expert rows and share its
K slice, with x staged in shared memory by cp.async.

CPU: every feasible point tiles E x H exactly, fits its x stage in 48 KiB of static shared
memory with the 64-byte row pad that keeps the 16-byte fragment loads conflict-free, and keeps
its weights within the register budget; the compiled PTX issues every weight load before the
first cp.async, stages x with 16-byte cp.async only, has exactly two barriers (none in the
token loop) and no shared-memory reduction.
GPU (-m gpu): each committed candidate against the reference at B = 1..64 in a changing order
(both sides of the TOK_GROUP boundary), back to back without a sync, and in a CUDA graph."""
from __future__ import annotations

import re

import pytest
import torch

from kernel_helpers import (ROOT, check_router_back_to_back, check_router_calls, check_router_graph, compiled_ptx,
                            family_candidates, load_module, ptx_entries, rendered_points)

FAMILY = "mma_rowsplit"
H, E = 7168, 896
SMEM_STATIC_MAX = 48 * 1024


def _candidates() -> list[str]:
    return family_candidates("moe_router", FAMILY)


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", f"router_rowsplit_{cid}")


def test_there_are_committed_candidates():
    assert len(_candidates()) >= 2


def test_every_point_tiles_the_gemm_and_fits(tmp_path):
    """Each feasible point, rendered: E x H tiled exactly, the x stage within 48 KiB of static
    shared memory, rows 64 bytes off a 128-byte multiple (8 lanes of a 16-byte load phase hit
    two rows in opposite bank halves), the weights within 128 registers per lane."""
    points = rendered_points("moe_router", FAMILY, tmp_path)
    assert len(points) >= 10
    for c, m in points:
        assert m.N_BLOCKS * m.ROWS_CTA == E and m.ROWS_CTA == m.ROWS_WARP * m.WARPS, c
        assert m.CTA_SPLITS * m.K_C == H and m.KB * 32 == m.K_C, c
        assert m.X_STRIDE >= m.K_C and (m.X_STRIDE * 2) % 128 == 64, c
        assert m.TOK_GROUP * m.X_STRIDE * 2 <= SMEM_STATIC_MAX, c
        assert m.KB * m.M_TILES * 2 * 4 <= 128, c                # weight registers per lane


def test_ptx_streams_weights_then_stages_x_without_a_reduction(tmp_path):
    cid = _candidates()[0]
    m = _module(cid)
    gemm = ptx_entries(compiled_ptx(ROOT / "kernels_generated/moe_router" / cid / "kernel.py", tmp_path))["kernel_cutlass_gemm_kernel"]
    assert gemm.count("ld.global.v4.b32") == m.KB * m.M_TILES * 2          # the weights, and only them
    assert gemm.index("cp.async") > gemm.rindex("ld.global.v4.b32")       # all in flight before x
    copies = re.findall(r"cp\.async\.\w+\.shared\.global \[%r\d+\], \[%rd\d+\], (\d+)", gemm)
    assert copies and set(copies) == {"16"}
    assert gemm.count("bar.sync") == 2                                       # stage in, stage out
    assert not re.search(r"\s(st\.shared|red\.|atom\.)", gemm)                  # no reduction through smem or L2
    assert gemm.count("ld.shared.v4.b32") == m.KB * m.N_TILES


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates())
def test_gpu_matches_reference(cid):
    mod = _module(cid)
    compiled = mod.compile(8, "--enable-tvm-ffi")
    check_router_calls(mod, compiled, (1, 2, 64, 5, 8, 17, 31, 32, 33, 1, 40, 63, 64, 3), 5000, cid)
    check_router_back_to_back(mod, compiled, (64, 1, 33, 8, 64, 2) * 3, 6000, cid)   # PDL overlaps the calls


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _candidates()[:1])
def test_gpu_cuda_graph_replay(cid):
    mod = _module(cid)
    check_router_graph(mod, mod.compile(8, "--enable-tvm-ffi"), 40, 7000, f"{cid} graph", replays=10)
