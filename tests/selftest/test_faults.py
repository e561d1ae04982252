"""Crashing and hanging candidates through the real toolchain worker (sandbox.run_job)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from harness.selftest import faults as F
from harness.toolchain.verdict import Verdict

PICK = ("import:segv_ctypes_null_read", "compile:abort", "import:os_exit_0", "compile:forged_result_on_result_fd",
        "import:grandchild_holds_pipes_child_exits", "compile:raise_system_exit_0")
HANG_PICK = ("import:waits_on_grandchild_holding_pipes", "compile:ignores_sigterm")


def test_fixture_counts_meet_the_issue():
    crashes, hangs = F.cpu_faults("t")
    assert len(crashes) >= 50 and len(hangs) >= 20
    assert len({f.name for f in crashes + hangs}) == len(crashes) + len(hangs)


def test_crashes_and_hangs_are_classified_without_orphans():
    token = F.new_token()
    crashes, hangs = F.cpu_faults(token)
    sel = [f for f in crashes if f.name in PICK] + [f for f in hangs if f.name in HANG_PICK]
    deadline = max(8.0, 2.0 * F.startup_s() + 4.0)
    out = F.run_faults([f for f in sel if not f.hang], 120.0, 2, token, None, lambda o: None)
    out += F.run_faults([f for f in sel if f.hang], deadline, 2, token, None, lambda o: None)
    assert len(out) == len(PICK) + len(HANG_PICK)
    for o in out:
        assert o.ok, o
        assert o.reached, o
        assert o.orphans == 0, o
    hang = [o for o in out if o.kill_latency_s is not None]
    assert hang and all(o.verdict == Verdict.TIMEOUT.value and o.kill_latency_s < 5.0 for o in hang)


def test_honest_candidate_passes_after_a_crash():
    token = F.new_token()
    crashes, _ = F.cpu_faults(token)
    segv = [f for f in crashes if f.name == "compile:segv_ctypes_null_read"]
    check = F.make_cascade_check(Path(tempfile.mkdtemp()) / "kernels_generated")
    out = F.run_faults(segv, 120.0, 1, token, check, lambda o: None)
    assert out[0].verdict == "CRASH" and out[0].cascade_ok is True, out[0]
