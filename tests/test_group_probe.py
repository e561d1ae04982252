"""scripts/gpu/group_probe.py's arrangements and summary (the timing itself needs a GPU)."""
from __future__ import annotations

import pytest
from gpu_scripts import gpu_script


@pytest.fixture(scope="module")
def gp():
    return gpu_script("group_probe")


def test_every_arrangement_times_each_name_once_and_pairs_two(gp):
    for name, groups in gp.ARRANGEMENTS.items():
        names = [k for g in groups for k in g]
        assert len(names) == 2 and len(set(names)) == 2, name
    assert gp.ARRANGEMENTS["split"] == [("K",), ("C",)]              # bench_kernels.py's groups
    assert gp.ARRANGEMENTS["joint"] == [("K", "C")]


def test_median_ratios_read_each_arrangement_in_its_own_order(gp):
    rows = [{"batch": 2, "arrangement": "split", "us": {"K": 1.0, "C": c}} for c in (1.1, 1.2, 1.5)]
    rows += [{"batch": 2, "arrangement": "joint_rev", "us": {"C": 2.0, "K": 1.0}},
             {"batch": 2, "arrangement": "aa_k", "us": {"K": 1.0, "K2": 0.95}},
             {"batch": 64, "arrangement": "split", "us": {"K": 1.0, "C": 9.0}}]
    got = gp.median_ratios(rows, 2)
    assert got["split"] == ("C", "K", pytest.approx(1.2))          # the median of three repeats
    assert got["joint_rev"] == ("K", "C", 0.5)
    assert got["aa_k"] == ("K2", "K", 0.95)
    assert set(got) == {"split", "joint_rev", "aa_k"}                # arrangements not timed are left out
    assert gp.median_ratios(rows, 64)["split"][2] == 9.0
