"""scripts/gpu/state_stream_probe.py on the CPU: the probes' byte accounting and occupancy caps,
and every probe kernel compiles for sm_90a (the timing itself needs the GPU)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_scripts import gpu_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ssp():
    return gpu_script("state_stream_probe")


def test_bytes_and_vectors_match_kda_state_tiles(ssp):
    fp32, bf16 = ssp.Probe("fp32", 2), ssp.Probe("bf16", 0)
    assert fp32.vectors_per_thread * 16 * ssp.THREADS == 128 * 128 * 4       # one fp32 tile per CTA
    assert bf16.vectors_per_thread * 16 * ssp.THREADS == 128 * 128 * 2
    assert fp32.bytes_per_call(64) == 2 * 64 * 12 * 128 * 128 * 4 == 100_663_296   # read + write, 12 heads


def test_shared_memory_caps_ctas_per_sm(ssp):
    for cap in (1, 2, 3):
        smem = ssp.Probe("fp32", cap).smem_bytes + 1024                      # with the per-CTA reserve
        assert cap * smem <= ssp.SMEM_PER_SM_BYTES < (cap + 1) * smem, cap
    assert ssp.Probe("fp32", 0).smem_bytes == 0
    assert len({p.name for p in ssp.PROBES}) == len(ssp.PROBES) == 8


PROBE = r"""
import os, sys
os.environ["CUTE_DSL_ARCH"] = "sm_90a"
sys.path.insert(0, sys.argv[1])
import state_stream_probe as ssp
for p in ssp.PROBES:
    ssp.build(p)
print("compiled", len(ssp.PROBES))
"""


def test_every_probe_compiles_for_sm90a():
    res = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "scripts" / "gpu")], capture_output=True,
                         text=True, timeout=600, cwd=ROOT, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "compiled 8"
