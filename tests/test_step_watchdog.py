"""scripts/gpu/step_watchdog.py: a step past its deadline ends the process while the main thread
is blocked in a C call (time.sleep here; a CUDA synchronise in a real hang), and the stderr names
the step; steps that finish in time exit normally."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"

PROGRAM = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from step_watchdog import StepWatchdog
dog = StepWatchdog(deadline_s=float(sys.argv[2]))
dog.step("quick step")
time.sleep(0.1)
dog.step("slow step B=1 TP8")
time.sleep(float(sys.argv[3]))
dog.done()
print("finished", flush=True)
"""


def _run(deadline_s: float, sleep_s: float) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(SCRIPTS), str(deadline_s), str(sleep_s)],
                         capture_output=True, text=True, timeout=60)
    return out, time.monotonic() - t0


def test_a_stuck_step_is_ended_at_its_deadline_and_named():
    out, wall_s = _run(deadline_s=1.0, sleep_s=30.0)
    assert out.returncode != 0 and "finished" not in out.stdout
    assert wall_s < 20                                      # not the 30 s the step would take
    last_step = [ln for ln in out.stderr.splitlines() if ln.startswith("[step]")][-1]
    assert "slow step B=1 TP8" in last_step
    assert "Timeout" in out.stderr                          # faulthandler's dump of the threads


def test_steps_that_finish_in_time_exit_normally():
    out, _ = _run(deadline_s=5.0, sleep_s=0.2)
    assert out.returncode == 0 and "finished" in out.stdout
    assert out.stderr.count("[step]") == 2


def test_the_deadline_must_be_positive():
    sys.path.insert(0, str(SCRIPTS))
    from step_watchdog import StepWatchdog

    with pytest.raises(ValueError):
        StepWatchdog(deadline_s=0)
