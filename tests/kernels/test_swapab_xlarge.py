"""The `xlarge` knob of the swap-AB GEMM template (prompts/kernels/_shared/_swapab.j2, session 57),
checked on the CPU through the compiled PTX.

The B <= 64 kernel walks 8 token tiles per K chunk. Without the knob a lane loads one tile's x
vectors, then runs that tile's MMAs, so each tile waits on its own L2 round trip (ncu of 072140's
large kernel at dense_down TP8 B=64 on an H100: 81% of the samples in long-scoreboard waits at the
MMAs). With it, every x vector of the chunk is loaded right behind the chunk's weights, before
any MMA. The MMAs and their order do not change, and the small kernel is left alone.
The GPU checks the sums (bench_kernels.py's correctness check, the numerics_unit gate).
"""
from __future__ import annotations

import re

from kernel_helpers import ROOT, swapab_source_kernels, template_params, variant_source

BASE = "072140b6c70e"            # promoted at dense_down TP8 (B 1..8): bulk + TMA, 4 warps, unroll_large 2
NT_LARGE = 8                     # 8-token MMA tiles per chunk of the B <= 64 kernel (LARGE_M = 64)


def _dense_down(source: str) -> tuple[str, str]:
    """(small, large) PTX at TP8 dense_down, compiled once per distinct source."""
    return swapab_source_kernels(source, 8, "dense_down")


def _loads_before_first_mma(ptx: str) -> int:
    lines = ptx.splitlines()
    first = min(i for i, s in enumerate(lines) if "mma.sync" in s)
    return sum("ld.global" in s for s in lines[:first])


def _mmas(ptx: str) -> list[str]:
    return re.findall(r"mma\.sync\S*", ptx)


def test_off_renders_the_committed_kernel():
    """The knob's default renders 072140 byte for byte (every committed render is checked by
    test_rerender.py; this pins the knob's off value to it)."""
    assert variant_source("skinny_gemm", BASE, xlarge=False) == \
        (ROOT / "kernels_generated/skinny_gemm" / BASE / "kernel.py").read_text()


def test_the_chunk_loads_every_tile_x_before_its_first_mma():
    """Large kernel: 2 * M_TILES weight vectors and NT x vectors per K block of the chunk precede the
    first MMA with the knob; without it at most the first tile's do (the PTX issues each x load just
    before its own MMAs), so the check fails on the plain loop."""
    params = template_params("skinny_gemm", BASE)
    ul, mt = params["unroll_large"], params["m_tiles"]
    weights = 2 * mt * ul
    _, large_off = _dense_down(variant_source("skinny_gemm", BASE, xlarge=False))
    _, large_on = _dense_down(variant_source("skinny_gemm", BASE, xlarge=True))
    assert weights < _loads_before_first_mma(large_off) <= weights + ul
    assert _loads_before_first_mma(large_on) == weights + NT_LARGE * ul


def test_same_mmas_and_the_small_kernel_untouched():
    """The knob moves loads only: the large kernel issues the same MMA instructions, and the small
    kernel's PTX is identical."""
    small_off, large_off = _dense_down(variant_source("skinny_gemm", BASE, xlarge=False))
    small_on, large_on = _dense_down(variant_source("skinny_gemm", BASE, xlarge=True))
    assert _mmas(large_on) == _mmas(large_off) and len(_mmas(large_on)) > 0
    assert small_on == small_off


def test_renders_state_the_knob():
    """The rendered docstring names the knob (a reader of kernel.py sees which loop runs)."""
    on = variant_source("skinny_gemm", BASE, xlarge=True)
    assert "xlarge=True" in on and "XLARGE (the B <= 64 kernel)" in on
    assert "xlarge" not in variant_source("skinny_gemm", BASE, xlarge=False).lower()
