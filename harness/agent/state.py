"""The state of a run, rebuilt by replaying its event log (nothing else is trusted)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .records import CandidateRecord, CompileInfo, ScoreKind, StageStatus
from .runlog import EventKind, RunLog


@dataclass(frozen=True)
class Incumbent:
    """What runs one search point today, as the newest evaluation timed it: the drafting prompt's
    time to beat at that point. `shape` and `state_dtype` name the point ("" = the op's default
    shape), so the prompt computes its floor there too."""

    us: float
    on_reference: bool            # no promoted kernel covers the point: the eager reference runs it
    shape: str = ""
    state_dtype: str = "fp32"


@dataclass
class RunState:
    config: dict[str, Any] = field(default_factory=dict)
    rounds_started: set[int] = field(default_factory=set)
    rounds_finished: set[int] = field(default_factory=set)
    proposals: dict[int, list[dict]] = field(default_factory=dict)
    drafts: dict[tuple[int, int], dict] = field(default_factory=dict)    # (round, slot) -> DRAFT data
    failed_slots: dict[tuple[int, int], str] = field(default_factory=dict)
    records: dict[str, CandidateRecord] = field(default_factory=dict)
    scored: set[str] = field(default_factory=set)
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    gates: dict | None = None
    promoted: dict | None = None
    stopped: str | None = None
    finished: bool = False

    # ---- replay ----------------------------------------------------------------------
    @classmethod
    def replay(cls, log: RunLog) -> "RunState":
        st = cls()
        for ev in log.events:
            st.apply(ev.kind, ev.data)
        return st

    def apply(self, kind: EventKind, d: dict) -> None:
        if kind is EventKind.RUN_STARTED:
            self.config = d["config"]
        elif kind is EventKind.RUN_RESUMED:
            self.stopped = None          # a resume ends the stop (a budget or --time-limit)
        elif kind is EventKind.ROUND_STARTED:
            self.rounds_started.add(d["round"])
        elif kind is EventKind.PROPOSALS:
            self.proposals[d["round"]] = d["proposals"]
        elif kind is EventKind.LLM_CALL:
            self.llm_calls += 1
            self.tokens += int(d.get("input_tokens", 0)) + int(d.get("output_tokens", 0))
            self.cost_usd += float(d.get("cost_usd") or 0.0)
        elif kind is EventKind.DRAFT:
            self.drafts[(d["round"], d["slot"])] = d
            if d["id"] not in self.records:
                self.records[d["id"]] = CandidateRecord(d["id"], d["round"], d["slot"], d["author"],
                                                        d.get("prompt_hash"), d.get("parent"),
                                                        (d.get("template") or {}).get("family"),
                                                        (d.get("template") or {}).get("params"))
        elif kind is EventKind.DRAFT_FAILED and d.get("final"):
            self.failed_slots[(d["round"], d["slot"])] = d["reason"]
        elif kind is EventKind.STAGE:
            self._apply_stage(d)
        elif kind is EventKind.ROUND_FINISHED:
            self.rounds_finished.add(d["round"])
        elif kind is EventKind.GATES:
            self.gates = d
        elif kind is EventKind.PROMOTED:
            self.promoted = d
        elif kind is EventKind.STOPPED:
            self.stopped = d["reason"]
        elif kind is EventKind.RUN_FINISHED:
            self.finished = True

    def _apply_stage(self, d: dict) -> None:
        rec = self.records[d["id"]]
        r = d["result"]
        if d["stage"] == "static":
            rec.static_ok, rec.static_problems = r["ok"], r["problems"]
        elif d["stage"] == "compile":
            rec.compile[r["arch"]] = CompileInfo(**{**r, "status": StageStatus(r["status"])})
        elif d["stage"] == "evaluate":
            rec.evaluate = CandidateRecord.from_json({"id": "", "round": 0, "slot": 0, "author": "",
                                                      "evaluate": r}).evaluate
        elif d["stage"] == "score":
            self.scored.add(d["id"])
            rec.score = r["score"]
            rec.score_kind = ScoreKind(r["kind"]) if r.get("kind") else None

    # ---- views -----------------------------------------------------------------------
    def has_stage(self, cid: str, stage: str, arch: str | None = None) -> bool:
        rec = self.records[cid]
        if stage == "static":
            return rec.static_ok is not None
        if stage == "compile":
            return arch in rec.compile
        if stage == "evaluate":
            return rec.evaluate is not None
        if stage == "score":
            return cid in self.scored
        raise ValueError(stage)

    def unscored(self, ids: list[str] | None = None) -> list[str]:
        """Of `ids` (default: every candidate, in round and slot order), those never scored: a
        GPU evaluation that --time-limit left for --resume."""
        if ids is None:
            ids = [r.id for r in sorted(self.records.values(), key=lambda c: (c.round, c.slot))]
        return [cid for cid in ids if cid not in self.scored]

    def deferred(self) -> list[str]:
        """Drafts (in round and slot order) compiled for every arch whose GPU evaluation did not
        run (a machine without a GPU): what `--resume` measures on a machine with one."""
        recs = sorted(self.records.values(), key=lambda c: (c.round, c.slot))
        return [r.id for r in recs if r.static_ok and r.compiled_everywhere and r.evaluate is not None
                and r.evaluate.status is StageStatus.NOT_RUN]

    def round_ids(self, round_no: int) -> list[str]:
        ids = [d["id"] for (r, _), d in sorted(self.drafts.items()) if r == round_no]
        return list(dict.fromkeys(ids))

    def ranked(self) -> list[CandidateRecord]:
        """Scored candidates, best first (measured times outrank compile proxies)."""
        scored = [r for r in self.records.values() if r.score is not None and math.isfinite(r.score)]
        return sorted(scored, key=lambda r: (r.score_kind is not ScoreKind.TIME_US, r.score, r.round, r.slot))

    def best_verified(self) -> CandidateRecord | None:
        ok = [r for r in self.ranked() if r.verified and r.score_kind is ScoreKind.TIME_US]
        return ok[0] if ok else None

    def incumbent_times(self) -> dict[int, Incumbent]:
        """batch -> what runs this run's search point today and its median time, from the newest
        evaluation that timed it (each draft's evaluation times the promoted kernel beside the
        draft, and the reference). Today's path is the promoted kernel covering the point, else the
        reference (Timing.today_us). Where the points also vary a static key (state dtype, GEMM
        shape), the first key timed stands for its batch, as the drafting prompt's target table
        shows one row a batch; the Incumbent names that key."""
        out: dict[int, Incumbent] = {}
        for r in sorted(self.records.values(), key=lambda c: (c.round, c.slot)):
            if r.evaluate is not None and r.evaluate.timings:
                first = (r.evaluate.timings[0].state_dtype, r.evaluate.timings[0].shape)
                for t in r.evaluate.timings:
                    if (us := t.today_us) is not None and (t.state_dtype, t.shape) == first:
                        out[t.batch] = Incumbent(us, t.covered is False, t.shape, t.state_dtype)
        return out

    def template_scores(self) -> dict[str, float]:
        """params key -> score of every template proposal whose candidate was scored
        (math.inf for failures), the input of the halving search."""
        from .families import params_key

        out: dict[str, float] = {}
        for r, props in self.proposals.items():
            for s, p in enumerate(props):
                key = params_key(p["family"], p["params"])
                if (r, s) in self.failed_slots:
                    out[key] = math.inf
                    continue
                d = self.drafts.get((r, s))
                if d is None or d["id"] not in self.scored:
                    continue
                sc = self.records[d["id"]].score
                out[key] = math.inf if sc is None else sc
        return out

    @staticmethod
    def _failed(rec: CandidateRecord) -> bool:
        return rec.static_ok is False or any(c.status is StageStatus.FAILED for c in rec.compile.values())
