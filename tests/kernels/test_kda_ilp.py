"""The kda_decode persistmix knobs of session 20, checked in the PTX compiled on the CPU.

- fp32_ilp / bf16_ilp > 1: the persistent kernel's delta rule runs phase by phase over groups of
  that many of a thread's rows, so each butterfly step of the row sums is issued for every row of
  the group before the next step (H200: fp32 4 rows 6-9% faster at 192-384 tiles,
  results/h200/session20/bench_kda_ilp.log). In the PTX that shows as runs of equal-offset
  shuffles as long as the group; without the knob the longest run is 2 (the L2 norms' q and k).
- fp32_small_v_split: the fp32 small plan (F32_ kernel) gets its own cluster size; the bf16 small
  plan keeps v_split.
Each check also runs on a point without the knob and must fail there: the tests can fail.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_helpers import ROOT, compiled_ptx, template_params

BASE = "d5a02a202445"                          # persistmix: mid v2, no interleave


def _family():
    from harness.agent.families import load_family

    return load_family(ROOT / "prompts/kernels/kda_decode/persistmix.py.j2", "kda_decode")


def _render(tmp_path, **over) -> Path:
    path = tmp_path / "variant" / "kernel.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_family().render(dict(template_params("kda_decode", BASE), **over)))
    return path


def _entry(ptx: str, name: str) -> str:
    found = [e for e in ptx.split(".entry ")[1:] if re.search(rf"_k{name}_", e.split("(", 1)[0])]
    assert len(found) == 1, f"{len(found)} entries named {name}"
    return found[0]


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
    assert longest_equal_shuffle_run(_entry(ptx, "KdaPersist")) == want


@pytest.mark.parametrize("fp32_v_split", [4, 8])
def test_fp32_small_plan_has_its_own_cluster_size(fp32_v_split):
    src = _family().render(dict(template_params("kda_decode", BASE), fp32_small_v_split=fp32_v_split))
    assert re.search(r"^V_SPLIT = 4$", src, re.M)                     # the bf16 small plan
    f32 = re.search(r"^F32_V_SPLIT = (\d+)$", src, re.M)
    assert f32 and int(f32.group(1)) == fp32_v_split
