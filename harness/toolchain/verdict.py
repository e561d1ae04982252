"""The verdict of one candidate's evaluation: a documented enum, ordered by the stage
that produced it (the first failing stage wins)."""
from __future__ import annotations

import enum


class Verdict(str, enum.Enum):
    STATIC_REJECT = "STATIC_REJECT"   # the ast checks refused the source; nothing ran
    COMPILE_ERROR = "COMPILE_ERROR"   # import or compile() raised, or returned no function
    CRASH = "CRASH"                   # the worker died (signal, os._exit, no/forged result)
    TIMEOUT = "TIMEOUT"               # the deadline passed; the whole process group was killed
    CUDA_ERROR = "CUDA_ERROR"         # a CUDA error (illegal address, launch failure, ...)
    WRONG = "WRONG"                   # ran, but outputs, input mutation or determinism failed
    OK = "OK"                         # every input set at every point matched the reference
    NOT_RUN = "NOT_RUN"               # a stage this machine cannot run (no GPU): never a pass

    @property
    def passed(self) -> bool:
        return self is Verdict.OK


# Exit codes of the sandboxed child process (harness/toolchain/_child.py).
CHILD_EXIT_OK = 0
CHILD_EXIT_BAD_JOB = 40
