"""What earlier sessions measured on a GPU for an op and did not promote: the op's ledger.

An agent that drafts kernels should not spend device time re-trying an idea that was already
built, run and measured, unless it changes what made the idea lose. Session 34 did exactly
that: it rebuilt attn_res's tensor-core Gram sum, which session 16 had measured 0.35-0.8 us
slower at every point, and measured it slower again.

Each op may keep `prompts/kernels/<op>/measured.json`:

    {"doc": "...", "entries": [{"idea": "...", "outcome": "slower", "numbers": "...",
                                "record": "results/h200/session16/bench_attnres_mma.log"}, ...]}

`record` is a committed file holding the measurement, so every entry can be checked against
the evidence. The drafting prompt lists the entries (`prompting.draft_prompt`). A malformed
ledger is a `UserError` naming the file: someone edited it by hand.
"""
from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..errors import UserError
from .runlog import atomic_write_text

LEDGER_NAME = "measured.json"


class Outcome(str, enum.Enum):
    SLOWER = "slower"                            # slower at every point it ran
    MIXED = "mixed"                              # faster at some points, slower at others
    NO_GAIN = "no_gain"                          # within noise, or under the perf gate's margin
    FASTER_NOT_PROMOTED = "faster_not_promoted"  # faster where it applies, too little over the scope


@dataclass(frozen=True)
class Measured:
    idea: str          # what was built, in enough words to recognise it again
    outcome: Outcome
    numbers: str       # what the GPU measured, against what
    record: str        # repo-relative path of the committed measurement

    def line(self) -> str:
        return f"{self.idea}: {self.outcome.value.replace('_', ' ')}, {self.numbers} ({self.record})"


def ledger_path(op: str, root: Path | None = None) -> Path:
    return (root or paths.REPO_ROOT) / "prompts" / "kernels" / op / LEDGER_NAME


def _read(path: Path) -> tuple[dict[str, Any], list[Measured]]:
    """The ledger file's JSON and its entries; UserError naming the file when malformed."""
    try:
        raw = json.loads(path.read_text())
        entries = raw["entries"]
        if not isinstance(entries, list):
            raise TypeError("'entries' is not a list")
        out = []
        for i, e in enumerate(entries):
            fields = {k: e[k] for k in ("idea", "outcome", "numbers", "record")}
            if not all(isinstance(v, str) and v.strip() for v in fields.values()):
                raise ValueError(f"entry {i}: every field must be a non-empty string")
            out.append(Measured(idea=fields["idea"], outcome=Outcome(fields["outcome"]),
                                numbers=fields["numbers"], record=fields["record"]))
        return raw, out
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{path}: malformed ledger ({type(exc).__name__}: {exc}); expected "
                        f'{{"entries": [{{"idea", "outcome" ({", ".join(o.value for o in Outcome)}), '
                        f'"numbers", "record"}}]}}') from None


def load_ledger(op: str, root: Path | None = None) -> list[Measured]:
    """The op's ledger entries in file order; [] when the op keeps none."""
    path = ledger_path(op, root)
    return _read(path)[1] if path.is_file() else []

DEFAULT_DOC = ("Ideas built, verified and timed on the H200 that were not kept (harness/agent/ledger.py): the "
               "drafting prompt lists them so an agent changes what made one lose before sending it again. "
               "record = the committed measurement.")


def add_entry(op: str, entry: Measured, root: Path | None = None) -> int:
    """Append one entry to the op's ledger (created when missing), written atomically; returns the
    ledger's entry count. The record must be a file under the repository; UserError otherwise, and
    for a malformed ledger (left as it was)."""
    base = root or paths.REPO_ROOT
    for name, value in (("idea", entry.idea), ("numbers", entry.numbers), ("record", entry.record)):
        if not value.strip():
            raise UserError(f"ledger entry: --{name} is empty")
    rec = Path(entry.record)
    if rec.is_absolute() or ".." in rec.parts or not (base / rec).is_file():
        raise UserError(f"ledger entry: --record {entry.record} is not a file under {base} "
                        "(commit the measurement first, then cite its repo-relative path)")
    path = ledger_path(op, root)
    raw: dict[str, Any] = _read(path)[0] if path.is_file() else {"doc": DEFAULT_DOC, "entries": []}
    raw["entries"].append({"idea": entry.idea, "outcome": entry.outcome.value, "numbers": entry.numbers,
                           "record": entry.record})
    atomic_write_text(path, json.dumps(raw, indent=1) + "\n")
    return len(raw["entries"])
