"""Durable runs: runs/<run-id>/ with an append-only event log.

Layout:
    events.jsonl          one JSON event per line, fsync'd after each append
    prompts/<name>.md     every prompt sent (scrubbed)
    replies/<name>.md     every reply received (scrubbed)
    candidates/<id>.json  every candidate's results (atomic rewrite)
    summary.json          the latest summary (atomic rewrite)

A killed run is rebuilt by replaying events.jsonl: a torn last line (the process died
mid-write) is ignored, so every event that was fsync'd is kept and none is doubled.
"""
from __future__ import annotations

import enum
import json
import os
import re
import secrets as _pysecrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..atomic_file import replacing
from .secrets import scrub, scrub_obj

_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,80}$")


class EventKind(str, enum.Enum):
    RUN_STARTED = "run_started"
    RUN_RESUMED = "run_resumed"
    ROUND_STARTED = "round_started"
    PROPOSALS = "proposals"            # the template agent's configurations for a round
    LLM_CALL = "llm_call"              # one provider request: tokens, cost, outcome
    DRAFT = "draft"                    # a candidate folder written for (round, slot)
    DRAFT_FAILED = "draft_failed"      # a slot that produced no candidate (after retries)
    STAGE = "stage"                    # one stage's result for one candidate
    ROUND_FINISHED = "round_finished"
    GATES = "gates"
    PROMOTED = "promoted"
    STOPPED = "stopped"                # budget or time limit ended the run
    RUN_FINISHED = "run_finished"


@dataclass
class Event:
    kind: EventKind
    data: dict[str, Any]
    ts: float = field(default_factory=time.time)
    seq: int = 0

    def to_json(self) -> str:
        return json.dumps({"seq": self.seq, "ts": self.ts, "kind": self.kind.value,
                           "data": scrub_obj(self.data)}, sort_keys=True)


def new_run_id(op: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{op}-{_pysecrets.token_hex(3)}"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same folder + fsync + rename: readers see old or new. The file
    keeps its permissions (a new one gets open()'s: 0666 less the umask)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class RunLog:
    """One run folder. Appends are serialized by the caller (the loop's main thread)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.events_path = folder / "events.jsonl"
        self._seq = 0
        self.events: list[Event] = []
        self._lock = threading.Lock()     # drafting threads append LLM_CALL events

    # ---- opening ---------------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> "RunLog":
        if not _RUN_ID_RE.match(run_id):
            raise ValueError(f"bad run id '{run_id}'")
        folder = runs_dir / run_id
        if folder.exists():
            raise FileExistsError(f"run {run_id} already exists")
        for sub in ("prompts", "replies", "candidates"):
            (folder / sub).mkdir(parents=True)
        return cls(folder)

    @classmethod
    def open(cls, runs_dir: Path, run_id: str) -> "RunLog":
        if not _RUN_ID_RE.match(run_id):
            raise ValueError(f"bad run id '{run_id}'")
        folder = runs_dir / run_id
        if not (folder / "events.jsonl").exists():
            raise FileNotFoundError(f"no run '{run_id}' under {runs_dir}")
        log = cls(folder)
        log.events = list(log._replay())
        log._seq = log.events[-1].seq if log.events else 0
        log._truncate_torn_tail()
        return log

    def _replay(self) -> Iterator[Event]:
        with open(self.events_path, "r", encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    break                      # torn write of a killed process: never fsync'd whole
                try:
                    raw = json.loads(line)
                    yield Event(EventKind(raw["kind"]), raw["data"], raw["ts"], raw["seq"])
                except (ValueError, KeyError):
                    break

    def _truncate_torn_tail(self) -> None:
        """Cut a partial last line so the next append starts on a fresh line."""
        with open(self.events_path, "rb") as f:
            data = f.read()
        keep = 0
        for _ in range(len(self.events)):
            nl = data.index(b"\n", keep)
            keep = nl + 1
        if keep != len(data):
            with open(self.events_path, "r+b") as f:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())

    # ---- writing ---------------------------------------------------------------------
    def append(self, kind: EventKind, **data: Any) -> Event:
        with self._lock:
            self._seq += 1
            ev = Event(kind, data, seq=self._seq)
            line = ev.to_json() + "\n"
            with open(self.events_path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            stored = Event(kind, json.loads(line)["data"], ev.ts, ev.seq)
            self.events.append(stored)
            return stored

    def write_text(self, sub: str, name: str, text: str) -> Path:
        """Store a prompt/reply/etc. (scrubbed) atomically; returns its path."""
        if "/" in name or name.startswith("."):
            raise ValueError(f"bad file name {name!r}")
        path = self.folder / sub / name
        atomic_write_text(path, scrub(text))
        return path

    def write_json(self, rel: str, obj: Any) -> None:
        atomic_write_text(self.folder / rel, json.dumps(scrub_obj(obj), indent=2, sort_keys=True, default=str) + "\n")

    # ---- reading ---------------------------------------------------------------------
    def of(self, kind: EventKind) -> list[Event]:
        return [e for e in self.events if e.kind is kind]
