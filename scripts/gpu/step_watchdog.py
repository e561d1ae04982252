"""A deadline per step of a GPU script, that also ends a step stuck inside CUDA.

A kernel that never finishes (session 18: a TMA copy elected a lane inside `if lane == 0`, and
every later mbarrier wait spun) blocks the Python thread in a CUDA synchronise, where no signal
handler runs; the device call then burns its whole limit and returns nothing. `step()` names what
runs next on stderr (flushed) and arms faulthandler's C-level timer: past the deadline it prints
every thread's traceback and exits the process with status 1. Results written before the step
(the scripts write their JSON as they go) stay under $OUT, and the last "[step]" line says which
candidate and point hung.

    from step_watchdog import StepWatchdog
    dog = StepWatchdog(deadline_s=300)
    dog.step("skinny_gemm swapab:0524e9 B=1 TP8: compile + check")
    ...
    dog.done()
"""
from __future__ import annotations

import faulthandler
import sys


class StepWatchdog:
    def __init__(self, deadline_s: float, stream=None):
        if deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, not {deadline_s}")
        self.deadline_s = deadline_s
        self.stream = stream or sys.stderr

    def step(self, what: str) -> None:
        """Start the clock for the next step (re-arms the deadline; the previous step's is dropped)."""
        print(f"[step] {what} (deadline {self.deadline_s:.0f} s)", file=self.stream, flush=True)
        faulthandler.dump_traceback_later(self.deadline_s, exit=True, file=self.stream)

    def done(self) -> None:
        """No step running: disarm."""
        faulthandler.cancel_dump_traceback_later()
