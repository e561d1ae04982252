"""`harness ci pins`: which gates' evidence an edit would make stale, before you make it.

Each gate's records pin the code that gate imports (gates/pins.py); this module only reads
those pins, so it is not itself pinned, and changing it re-gates nothing. Record-level pins
(the candidate folder, the op's reference, the gate config) stale every gate of the records
they cover; the README lists them.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import UserError


@dataclass
class GatePin:
    gate: str
    code_sha256: str
    files: list[str]            # repo-relative, sorted


@dataclass
class PathPins:
    path: str                   # repo-relative
    gates: list[str]            # the gates whose code pin covers it, in gate order


def gate_pins(root: Path) -> list[GatePin]:
    from gates.pins import gate_code_pins

    return [GatePin(g, c.code_sha256, list(c.files)) for g, c in gate_code_pins(root).items()]


def path_pins(root: Path, paths: list[str]) -> list[PathPins]:
    """For each path (relative to the repository root, or absolute inside it), the gates that pin it."""
    root = root.resolve()
    pins = gate_pins(root)
    out = []
    for raw in paths:
        p = Path(raw)
        p = (p if p.is_absolute() else Path.cwd() / p).resolve()
        try:
            rel = p.relative_to(root).as_posix()
        except ValueError:
            raise UserError(f"{raw}: not inside the repository {root}") from None
        if not p.exists():                   # a typo would read "no gate code pins it"
            raise UserError(f"{raw}: no such file")
        if p.is_dir():
            raise UserError(f"{raw} is a folder: name the files in it")
        out.append(PathPins(rel, [g.gate for g in pins if rel in g.files]))
    return out
