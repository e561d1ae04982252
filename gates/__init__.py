"""The fast-track gates (docs/fast_track_gates.md): one module per gate, one frozen config.

Every gate is `run(ctx: GateContext) -> GateResult` plus a pure `decide(...)` that turns
measured numbers into a verdict; CPU tests drive `decide` on synthetic measurements and the
evidence check re-derives verdicts from recorded numbers with it. Nothing here imports
pydantic or gitpython at module level: the GPU machine has neither.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


class Verdict(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not_run"      # needs hardware or a tool this machine lacks: never a pass
    ERROR = "error"          # the gate itself broke (a bug or a crashing candidate)


class GateName(str, enum.Enum):
    ISOLATION = "isolation"
    STATIC = "static"
    SCOPE = "scope"
    NUMERICS_UNIT = "numerics_unit"
    NUMERICS_MODEL = "numerics_model"
    PERF_SWEEP = "perf_sweep"


ALL_GATES: tuple[GateName, ...] = tuple(GateName)
GPU_GATES: frozenset[GateName] = frozenset({GateName.NUMERICS_UNIT, GateName.NUMERICS_MODEL, GateName.PERF_SWEEP})
CPU_GATES: tuple[GateName, ...] = tuple(g for g in ALL_GATES if g not in GPU_GATES)


@dataclass
class GateResult:
    gate: str
    verdict: Verdict
    reasons: list[str] = field(default_factory=list)      # one line per problem (empty on pass)
    numbers: dict[str, Any] = field(default_factory=dict)  # every measured number, JSON-able
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "verdict": self.verdict.value, "reasons": list(self.reasons),
                "numbers": self.numbers, "duration_s": self.duration_s}


@dataclass
class GateContext:
    """What every gate sees: the candidate on disk, the repo, the frozen config."""

    op: str
    candidate_id: str
    root: Path                       # repository root (HARNESS_ROOT in tests)
    config: "GateConfig"
    base: str | None = None          # base commit (None: isolation resolves the default)
    device: str = "cpu"
    model_config: str = "tiny"       # numerics_model: K3 config name ("tiny" is a CPU smoke)

    @property
    def candidate_dir(self) -> Path:
        return self.root / "kernels_generated" / self.op / self.candidate_id


def gate_code_hashes(root: Path) -> dict[str, str]:
    """Each gate's code hash: what its evidence pins (gates/pins.py says which files)."""
    from .pins import gate_code_pins

    return {g: c.code_sha256 for g, c in gate_code_pins(root).items()}


from .config import GateConfig, load_config  # noqa: E402  (re-exported)

Runner = Callable[[GateContext], GateResult]


def runner(gate: GateName) -> Runner:
    """The `run` function of one gate module (imported lazily: GPU gates import torch/cutlass)."""
    import importlib

    return importlib.import_module(f"gates.{gate.value}").run


def timed(gate: GateName, fn: Runner, ctx: GateContext) -> GateResult:
    """Run one gate; a gate that raises is an ERROR verdict with the exception as its reason."""
    t0 = time.perf_counter()
    try:
        res = fn(ctx)
    except Exception as exc:  # noqa: BLE001 - a crashing gate or candidate is a recorded verdict
        res = GateResult(gate.value, Verdict.ERROR, [f"{type(exc).__name__}: {exc}"])
    res.duration_s = round(time.perf_counter() - t0, 3)
    return res
