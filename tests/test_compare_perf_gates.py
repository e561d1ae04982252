"""scripts/compare_perf_gates.py: a replacement against the kernel it replaced, point by point, in
their own committed perf gates (no GPU)."""
from __future__ import annotations

import json

import pytest
from gpu_scripts import tool_script


@pytest.fixture(scope="module")
def cp():
    return tool_script("compare_perf_gates")


def test_b83f9b_against_7e3919_in_their_committed_gates(cp):
    """Session 59's gate of 7e3919 and session 64's of b83f9b, both on H100s: at B 1..8 b83f9b runs
    7e3919's code, so the ratios there read the two runs' offset (~1.00); at B 16..64 its midpipe."""
    old = cp.newest_perf_gate(cp.ROOT, "skinny_gemm", cp.resolve("skinny_gemm", "7e3919"))
    new = cp.newest_perf_gate(cp.ROOT, "skinny_gemm", cp.resolve("skinny_gemm", "b83f9b"))
    assert old.gpu == new.gpu == "NVIDIA H100 80GB HBM3"
    ratios = cp.compare(old, new)
    assert len(ratios) == 34 and [r.batch for r in ratios] == sorted(r.batch for r in ratios)
    same_code = [r.ratio for r in ratios if r.batch <= 8]
    pipe = [r.ratio for r in ratios if r.batch >= 16]
    assert len(same_code) == 16 and all(abs(x - 1.0) < 0.01 for x in same_code)
    assert len(pipe) == 18 and min(pipe) > 1.01
    assert all(r.ratio == pytest.approx(r.new_fraction / r.old_fraction) for r in ratios)
    s = cp.summary(ratios)
    assert sorted(s) == [1, 2, 4, 8, 16, 32, 64] and s[16][0] == 6 and s[16][2] <= s[16][1] <= s[16][3]


def test_the_command_prints_both_gates_and_says_when_the_cards_differ(cp, capsys):
    assert cp.main(["skinny_gemm", "7e3919", "b83f9b"]) == 0
    out = capsys.readouterr().out
    assert "old: skinny_gemm/7e39195ca46f" in out and "new: skinny_gemm/b83f9b12c630" in out
    assert "different cards" not in out and "B=64" in out
    assert cp.main(["skinny_gemm", "d4747b", "b01a64"]) == 0          # H100 gate against an H200 gate
    assert "note: the two gates ran on different cards" in capsys.readouterr().out
    assert cp.main(["skinny_gemm", "7e3919", "b83f9b", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["old"]["candidate"] == "7e39195ca46f" and len(d["points"]) == 34
    assert set(d["new"]) == {"candidate", "record", "gpu", "geomean_speedup"}


@pytest.mark.parametrize("args, message", [
    (["skinny_gemm", "7e3919", "zzz"], "candidate 'zzz' of skinny_gemm: not found"),
    (["skinny_gemm", "7e3919", "0"], "candidate '0' of skinny_gemm: matches several candidates"),
    (["no_such_op", "a", "b"], "unknown op 'no_such_op'"),
    (["skinny_gemm", "7e3919", ""], "empty candidate id of skinny_gemm"),
])
def test_bad_input_is_one_line_and_exit_2(cp, capsys, args, message):
    assert cp.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_candidate_without_a_passing_perf_gate_is_named(cp, tmp_path):
    (tmp_path / "kernels_generated" / "skinny_gemm" / "abc123").mkdir(parents=True)
    with pytest.raises(ValueError, match="no evidence record with a passing perf_sweep"):
        cp.newest_perf_gate(tmp_path, "skinny_gemm", "abc123")
