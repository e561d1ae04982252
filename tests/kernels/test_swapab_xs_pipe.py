"""The `pipe` knob of the swapab_xs family (prompts/kernels/skinny_gemm/swapab_xs.py.j2, session 57),
checked on the CPU through the compiled PTX.

Without it a chunk issues its weight and x loads, waits for them at the barrier that stages x in
shared memory, and runs its MMAs with nothing in flight. With it, chunk 0's loads are issued before
the K loop and chunk c + 1's inside it, before chunk c's MMAs, into a second register set. The MMAs
are the same; the GPU checks the sums (bench_kernels.py's correctness check)."""
from __future__ import annotations

import re

from kernel_helpers import ROOT, ptx_entries_by_name, source_ptx, variant_source

BASE = "aadb176e313b"          # a committed swapab_xs point (8 warps, 8-CTA clusters)


def _kernels(source: str) -> dict[str, str]:
    """Kernel name -> PTX body at TP8 latent_down (small and large kernel)."""
    return ptx_entries_by_name(source_ptx(source, 8, "latent_down"))


def _count(ptx: str, pattern: str) -> int:
    return len(re.findall(pattern, ptx))


def test_off_renders_the_committed_kernel():
    assert variant_source("skinny_gemm", BASE, pipe=False) == \
        (ROOT / "kernels_generated/skinny_gemm" / BASE / "kernel.py").read_text()


def test_every_load_site_twice_and_the_same_mmas():
    """Each kernel's load sites appear twice (before the loop, and for the next chunk inside it); the
    MMA instructions and the shared-memory stores of x are those of the plain loop."""
    off = _kernels(variant_source("skinny_gemm", BASE, pipe=False))
    on = _kernels(variant_source("skinny_gemm", BASE, pipe=True))
    assert sorted(off) == sorted(on) and len(on) == 2          # the small and the B <= 64 kernel
    for name in on:
        assert _count(on[name], r"ld\.global") == 2 * _count(off[name], r"ld\.global") > 0
        assert _count(on[name], r"mma\.sync") == _count(off[name], r"mma\.sync") > 0
        assert _count(on[name], r"st\.shared\.v4") == _count(off[name], r"st\.shared\.v4")


def test_the_next_chunks_loads_precede_this_chunks_first_mma_in_the_loop():
    """In the loop body, between the barrier that makes x visible and the chunk's first MMA, the plain
    kernel issues no global load and the piped one issues the next chunk's."""
    def loads_before_first_mma_after_second_barrier(ptx: str) -> int:
        lines = ptx.splitlines()
        bars = [i for i, s in enumerate(lines) if "bar.sync" in s or "barrier.sync" in s]
        first_mma = min(i for i, s in enumerate(lines) if "mma.sync" in s)
        second = [i for i in bars if i < first_mma][-1]         # the last barrier before the first MMA
        return sum("ld.global" in s for s in lines[second:first_mma])

    off = _kernels(variant_source("skinny_gemm", BASE, pipe=False))
    on = _kernels(variant_source("skinny_gemm", BASE, pipe=True))
    for name in on:
        assert loads_before_first_mma_after_second_barrier(off[name]) == 0
        assert loads_before_first_mma_after_second_barrier(on[name]) > 0
