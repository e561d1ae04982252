"""Records of a selftest run: one Figure per counted outcome, grouped by section.

A figure has a value and, where there is one, the bound it must meet (`target`, with
`op` "==" / "<=" / ">="). A section that this machine cannot run (no GPU) is NOT_RUN,
never PASS."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_RUN = "NOT_RUN"      # needs a GPU (or another thing this machine lacks): never a pass
    INFO = "INFO"            # a measured number with no bound (kill latency, wall time)


@dataclass
class Figure:
    name: str
    value: Any
    target: Any = None
    op: str = "=="
    unit: str = ""
    note: str = ""
    status: Status = Status.INFO

    def judge(self) -> "Figure":
        if self.status is Status.NOT_RUN or self.target is None:
            return self
        v, t = self.value, self.target
        ok = {"==": v == t, "<=": v is not None and v <= t, ">=": v is not None and v >= t}[self.op]
        self.status = Status.PASS if ok else Status.FAIL
        return self


@dataclass
class Section:
    key: str                 # crashes | durability | cheats | secrets | cli | llm
    title: str
    figures: list[Figure] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)    # one row per fixture / case
    wall_s: float = 0.0
    error: str = ""          # the section itself broke (a bug in the selftest or the harness)

    def add(self, name: str, value: Any, target: Any = None, op: str = "==", unit: str = "",
            note: str = "", not_run: bool = False) -> Figure:
        f = Figure(name, value, target, op, unit, note, Status.NOT_RUN if not_run else Status.INFO).judge()
        self.figures.append(f)
        return f

    @property
    def status(self) -> Status:
        if self.error or any(f.status is Status.FAIL for f in self.figures):
            return Status.FAIL
        if any(f.status is Status.PASS for f in self.figures):
            return Status.PASS
        return Status.NOT_RUN if any(f.status is Status.NOT_RUN for f in self.figures) else Status.INFO


@dataclass
class SelftestReport:
    quick: bool
    gpu: bool
    sections: list[Section] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(s.status is not Status.FAIL for s in self.sections)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        for s, sd in zip(self.sections, d["sections"]):
            sd["status"] = s.status.value
        return d
