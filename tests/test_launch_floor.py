"""scripts/gpu/launch_floor.py: every launch shape compiles for sm_90a on a CPU, the table prints
each row; the timing itself runs only on a GPU (the script)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_scripts import gpu_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lf():
    return gpu_script("launch_floor")


def test_shapes_cover_our_launches(lf):
    assert len({s.name for s in lf.SHAPES}) == len(lf.SHAPES)
    assert {s.cluster for s in lf.SHAPES} >= {1, 2, 8} and any(s.pdl for s in lf.SHAPES)
    for s in lf.SHAPES:
        assert s.grid_x % s.cluster == 0 and s.threads % 32 == 0 and s.threads <= 1024, s


def test_table_has_one_line_per_row(lf):
    rows = [{"name": "a", "median_us": 1.234, "p10_us": 1.1, "p90_us": 1.4},
            {"name": "b, clusters of 2", "median_us": 2.0, "p10_us": 1.9, "p90_us": 2.25}]
    lines = lf.table(rows).splitlines()
    assert len(lines) == 3 and "1.23" in lines[1] and "1.90..2.25" in lines[2]


PROBE = r"""
import os, sys, pathlib, re
os.environ["CUTE_DSL_ARCH"] = "sm_90a"
sys.path.insert(0, sys.argv[1])
import launch_floor as lf
for s in lf.SHAPES:
    lf.build(s)
print("compiled", len(lf.SHAPES))
"""


def test_every_shape_compiles_for_sm90a():
    res = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "scripts" / "gpu")], capture_output=True,
                         text=True, timeout=600, cwd=ROOT, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1].startswith("compiled ")
