"""The kda_decode persistmix mid-plan knobs of session 19, checked in the PTX compiled on the CPU.

- mid_v_split > 1: the mid fused plan splits a head's value rows over a cluster (the same kernel as
  the small plan), so 384 tiles launch 768 CTAs of half a tile each. On the H200 the mid plan over a
  2-CTA cluster (d5a02a) took 7.07 us against 8d9661's 8.17 at 192 bf16 tiles and 12.18 against
  14.15 at 384 (results/h200/session19/bench_kda_mid.log).
- mid_min_ctas > 0: launch bounds on the mid kernel (.maxntid, .minnctapersm), so ptxas keeps its
  registers at or below 65536 / (threads x N) and N CTAs fit an SM. 8d9661's mid kernel ran 128
  registers at 256 threads: 2 CTAs an SM, 384 CTAs in 1.45 waves (ncu, session 19).
- v_split 8 with push: every CTA's pushed RMSNorm buffer holds all 8 peers' partials (it held 4,
  enough for v_split <= 4 only).
Each check also runs on a point without the knob and must fail there: the tests can fail.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel_helpers import ROOT, compiled_ptx, family_candidates, kernel_entry, template_params, variant_source, write_variant

BASE = "8d966129dc0a"                         # promoted persistmix: mid v1, no launch bounds


def _with(pred) -> list[str]:
    return [c for c in family_candidates("kda_decode", "persistmix") if pred(template_params("kda_decode", c))]


MID_SPLIT = _with(lambda p: p.get("mid_v_split", 1) > 1)


def _render(tmp_path, **over) -> Path:
    """BASE's params with `over`, rendered to a kernel.py under tmp_path (the launch-bounded plans
    spill a few bytes, so none is committed: tests/kernels/test_compile_candidates.py's bar)."""
    return write_variant(tmp_path, "kda_decode", BASE, **over)


def _mid_entry(kernel_path: Path, tmp_path, state_dtype: str = "bf16") -> str:
    return kernel_entry(compiled_ptx(kernel_path, tmp_path, state_dtype=state_dtype), "MID_KdaDecode")


def _bounds(entry: str) -> tuple[int | None, int | None]:
    """(.maxntid x, .minnctapersm) of one PTX entry; None where absent."""
    head = entry[:entry.index("{")]
    nt = re.search(r"\.maxntid\s+(\d+)", head)
    mn = re.search(r"\.minnctapersm\s+(\d+)", head)
    return (int(nt.group(1)) if nt else None), (int(mn.group(1)) if mn else None)


def test_the_mid_split_has_a_committed_point():
    assert MID_SPLIT and BASE not in MID_SPLIT


@pytest.mark.parametrize("min_ctas", [0, 3, 4])
def test_mid_launch_bounds(min_ctas, tmp_path):
    path = _render(tmp_path, mid_v_split=2, mid_min_ctas=min_ctas)
    threads = template_params("kda_decode", BASE)["mid_warps"] * 32
    maxntid, minctas = _bounds(_mid_entry(path, tmp_path))
    if min_ctas:
        assert (maxntid, minctas) == (threads, min_ctas)
    else:
        assert minctas is None


@pytest.mark.parametrize("cid", MID_SPLIT[:1] + [BASE])
def test_mid_plan_over_a_cluster_pushes_its_rms_partials(cid, tmp_path):
    body = _mid_entry(ROOT / "kernels_generated/kda_decode" / cid / "kernel.py", tmp_path)
    pushes = len(re.findall(r"st\.async\.shared::cluster\.mbarrier::complete_tx::bytes", body))
    split = template_params("kda_decode", cid).get("mid_v_split", 1) > 1
    assert (pushes == 1 and "mapa" in body) if split else (pushes == 0 and "barrier.cluster" not in body)


@pytest.mark.parametrize("v_split", [4, 8])
def test_pushed_rms_buffer_holds_every_peer(v_split):
    """The pushed partials land in part[rank]: the buffer of the small and fp32-small plans needs
    V_SPLIT floats (4 before session 19); the mid plan (v_split 1) keeps 4."""
    src = variant_source("kda_decode", BASE, v_split=v_split)
    allocs = re.findall(r"part = smem\.allocate_tensor\(Float32, cute\.make_layout\(\((\d+),\)\)", src)
    assert sorted(int(n) for n in allocs) == sorted([max(4, v_split)] * 2 + [4])
