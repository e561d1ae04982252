"""The kda_decode persistmix knobs of session 20, checked in the PTX compiled on the CPU.

- fp32_ilp / bf16_ilp > 1: the persistent kernel's delta rule runs phase by phase over groups of
  that many of a thread's rows, so each butterfly step of the row sums is issued for every row of
  the group before the next step (H200: fp32 4 rows 6-9% faster at 192-384 tiles,
  results/h200/session20/bench_kda_ilp.log). In the PTX that shows as runs of equal-offset
  shuffles as long as the group; without the knob the longest run is 2 (the L2 norms' q and k).
- fp32_stages 1 with fp32_ctas_per_sm 2: the persistent kernel without prefetch ahead, two CTAs an
  SM (unmeasured in session 20).
- fp32_tiny_hi > 0: fp32 at B * h <= fp32_tiny_hi runs a fourth plan, the fp32 small plan's fused
  kernel over 8-CTA clusters (T32_ constants); bf16 and larger tile counts keep their plans.
Each check also runs on a point without the knob and must fail there: the tests can fail.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_helpers import compiled_ptx, kernel_entry, load_module, write_variant

BASE = "d5a02a202445"                          # persistmix: mid v2, no interleave


def _render(tmp_path, **over) -> Path:
    return write_variant(tmp_path, "kda_decode", BASE, **over)


def longest_equal_shuffle_run(entry: str) -> int:
    """The longest run of consecutive shfl.sync.bfly with the same offset (other instructions may
    sit between them, not a shuffle with another offset)."""
    offsets = re.findall(r"shfl\.sync\.bfly\.b32\s+[^,]+,\s*[^,]+,\s*(\d+)", entry)
    assert offsets, "no butterfly shuffles found"
    best = run = 1
    for a, b in zip(offsets, offsets[1:]):
        run = run + 1 if a == b else 1
        best = max(best, run)
    return best


@pytest.mark.parametrize("state_dtype,over,want", [
    ("fp32", {}, 2),
    ("fp32", {"fp32_ilp": 4, "bf16_ilp": 2}, 4),
    ("bf16", {"fp32_ilp": 4, "bf16_ilp": 2}, 2),
    ("bf16", {"fp32_ilp": 4}, 2),                 # bf16 keeps one row at a time
])
def test_persist_interleaves_the_rows_of_a_group(state_dtype, over, want, tmp_path):
    ptx = compiled_ptx(_render(tmp_path, **over), tmp_path, state_dtype=state_dtype)
    assert longest_equal_shuffle_run(kernel_entry(ptx, "KdaPersist")) == want


@pytest.mark.parametrize("tiny_hi", [0, 12])
def test_fp32_tiny_plan_takes_the_fewest_tiles(tiny_hi, tmp_path):
    path = _render(tmp_path, fp32_tiny_hi=tiny_hi)
    src = path.read_text()
    assert bool(re.search(r"^T32_V_SPLIT = 8$", src, re.M)) == (tiny_hi > 0)
    assert re.search(r"^V_SPLIT = 4$", src, re.M)                     # the small plans keep theirs
    m = load_module(path, f"kda_tiny_{tiny_hi}")
    for h in (12, 6):                                                 # TP8, TP16 local heads
        fp32 = m.ByTiles(m.PLANS["fp32"], h, "small", "mid", "persist", *(["tiny"] if tiny_hi else []))
        bf16 = m.ByTiles(m.PLANS["bf16"], h, "small", "mid", "persist", *(["tiny"] if tiny_hi else []))
        for b in (1, 2, 4, 8, 16, 32, 64):
            tiles = b * h
            want = "tiny" if tiles <= tiny_hi else fp32.which(b) if tiles > tiny_hi else None
            assert fp32.which(b) == want and (want != "tiny" or tiles <= 12)
            assert bf16.which(b) != "tiny"
        assert (fp32.which(1) == "tiny") == (tiny_hi >= h)


def test_fp32_tiny_plan_compiles_at_the_small_plans_shape(tmp_path):
    ptx = compiled_ptx(_render(tmp_path, fp32_tiny_hi=12), tmp_path, state_dtype="fp32")
    tiny = kernel_entry(ptx, "T32_KdaDecode")
    small = kernel_entry(ptx, "F32_KdaDecode")
    head = lambda e: re.search(r"\.reqntid\s+(\d+)", e.split("{", 1)[0]).group(1)  # noqa: E731
    assert head(tiny) == head(small)                                  # the fp32 small plan's shape
    assert tiny.split("{", 1)[1] != small.split("{", 1)[1]            # over other clusters (RB 16, not 32)


@pytest.mark.parametrize("stages,ctas_per_sm", [(1, 2), (3, 1)])
def test_persist_pipeline_depth_and_ctas_per_sm(stages, ctas_per_sm, tmp_path):
    """fp32_stages 1 (no tile prefetched ahead) with 2 CTAs an SM: launch bounds for 2, and the only
    cp.async wait is for everything; 3 stages at one CTA an SM wait with 2 groups still in flight."""
    path = _render(tmp_path, fp32_ilp=4, fp32_stages=stages, fp32_ctas_per_sm=ctas_per_sm, fp32_warps=8 if stages == 1 else 16)
    entry = kernel_entry(compiled_ptx(path, tmp_path, state_dtype="fp32"), "KdaPersist")
    head = entry.split("{", 1)[0]
    bound = re.search(r"\.minnctapersm\s+(\d+)", head)
    assert (int(bound.group(1)) if bound else 1) == ctas_per_sm
    waits = {int(n) for n in re.findall(r"cp\.async\.wait_group\s+(\d+)", entry)}
    assert waits == {0, stages - 1} if stages > 1 else waits == {0}
