"""Typed views the dashboard renders: built by collect.py from the folder layout, read by
the templates. Nothing here reads disk."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Badge(str, enum.Enum):
    """What a gate shows: a recorded verdict, or why there is none to show."""

    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not_run"
    ERROR = "error"
    MISSING = "missing"        # no evidence record carries this gate


class PromotionState(str, enum.Enum):
    PROMOTED = "promoted"          # the manifest names a candidate of this op
    READY = "ready"                # a candidate's fresh evidence passes every gate
    GATED = "gated"                # evidence exists, not every gate passes
    CANDIDATES = "candidates"      # candidates, no evidence
    NONE = "none"                  # no candidate


@dataclass
class GateView:
    gate: str
    badge: Badge
    record: str = ""               # evidence file name
    created_utc: str = ""
    host: str = ""
    stale: list[str] = field(default_factory=list)    # hash mismatches with the files on disk
    reasons: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@dataclass
class EvidenceView:
    file: str
    created_utc: str = ""
    host: str = ""
    gpu: str = ""
    hardware: dict[str, Any] = field(default_factory=dict)
    gate_config_version: int | None = None
    head_commit: str = ""
    verdicts: dict[str, str] = field(default_factory=dict)
    stale: list[str] = field(default_factory=list)
    error: str = ""                # unparsable, invalid or edited after writing


@dataclass
class SweepPoint:
    key: str                       # gates.points.key label
    tp: int
    batch: int
    series: str                    # the label of its line in the plot (TP and other axes)
    speedup: float | None
    roofline_fraction: float | None
    candidate_us: float | None
    incumbent_us: float | None
    floor_us: float | None
    noise_rel: float | None


@dataclass
class CompileFact:
    arch: str
    tp: int | None
    verdict: str
    message: str = ""
    compile_s: float | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    ld128: int | None = None
    source: str = ""               # "scope gate <record>" or "run <run-id>"


@dataclass
class DriftSeries:
    run_kind: str                  # long_generation, long_context, sampling, structured
    metric: str                    # e.g. kl, logit_rel_err
    values: list[float]            # one per generated token (step)


@dataclass
class CounterRow:
    source: str                    # where in the evidence the counters were found
    op: str
    outcome: str
    reason: str
    count: int


@dataclass
class ModelRunView:
    kind: str
    tokens: int | None
    context: int | None
    greedy_agreement: float | None
    sampling_agreement: float | None
    max_kl: float | None
    max_logit_rel_err: float | None
    kernel_calls_on: int | None
    kernel_calls_off: int | None
    valid: bool | None
    noise_max_kl: float | None = None     # the benign perturbation path's (the gate's noise floor)
    expert_flips: int | None = None       # chosen-expert sets that differ from the off path's, all steps
    noise_expert_flips: int | None = None


@dataclass
class CandidateView:
    op: str
    id: str
    author: str = ""
    parent: str | None = None
    created_utc: str = ""
    scope: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] | None = None
    source: str = ""
    load_error: str = ""
    promoted: bool = False
    evidence: list[EvidenceView] = field(default_factory=list)
    gates: dict[str, GateView] = field(default_factory=dict)     # latest record per gate
    sweep: list[SweepPoint] = field(default_factory=list)
    geomean_speedup: float | None = None
    layer: dict[str, Any] | None = None                         # per-layer A/B of perf_sweep
    compile: list[CompileFact] = field(default_factory=list)
    model_runs: list[ModelRunView] = field(default_factory=list)
    model_fused_off: list[str] = field(default_factory=list)   # fused kernels the model gate switched off
    drift: list[DriftSeries] = field(default_factory=list)
    counters: list[CounterRow] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)               # run ids that drafted it

    @property
    def all_pass_fresh(self) -> bool:
        return bool(self.gates) and all(g.badge is Badge.PASS and not g.stale for g in self.gates.values())

    @property
    def n_pass(self) -> int:
        return sum(1 for g in self.gates.values() if g.badge is Badge.PASS)

    def speedup_range(self) -> tuple[float, float] | None:
        v = [p.speedup for p in self.sweep if p.speedup is not None]
        return (min(v), max(v)) if v else None

    def roofline_range(self) -> tuple[float, float] | None:
        v = [p.roofline_fraction for p in self.sweep if p.roofline_fraction is not None]
        return (min(v), max(v)) if v else None


@dataclass
class OpView:
    name: str
    summary: str
    incumbent: str | None                  # promoted candidate id, None: the reference
    best: str | None                       # best candidate id by geomean speedup
    state: PromotionState
    candidates: list[CandidateView] = field(default_factory=list)
    last_promotion: "PromotionEvent | None" = None

    def candidate(self, cid: str | None) -> CandidateView | None:
        return next((c for c in self.candidates if c.id == cid), None)


@dataclass
class RoundRow:
    round: int
    started_ts: float | None
    finished_ts: float | None
    candidates: list[str]
    best: str | None
    best_score: float | None
    failed_slots: int


@dataclass
class RunCandidateRow:
    id: str
    round: int
    slot: int
    author: str
    family: str | None
    params: dict[str, Any] | None
    static: str                    # ok | refused | -
    compile: dict[str, str]        # arch -> status
    evaluate: str                  # verdict or -
    score: float | None
    score_kind: str | None
    summary: str
    drafted_ts: float | None


@dataclass
class LlmCallRow:
    ts: float
    provider: str
    model: str
    attempt: int
    outcome: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    detail: str


@dataclass
class EventRow:
    seq: int
    ts: float
    kind: str
    text: str


@dataclass
class RunView:
    id: str
    op: str = ""
    agent: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    started_ts: float | None = None
    last_ts: float | None = None
    finished: bool = False
    stopped: str | None = None
    rounds: list[RoundRow] = field(default_factory=list)
    candidates: list[RunCandidateRow] = field(default_factory=list)
    llm_calls: list[LlmCallRow] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    gates: dict[str, Any] | None = None
    promoted: dict[str, Any] | None = None
    events: list[EventRow] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)   # id -> CandidateRecord JSON
    not_measured: list[str] = field(default_factory=list)    # compiled without a GPU: --resume on one measures them
    error: str = ""

    @property
    def status(self) -> str:
        if self.error:
            return "unreadable"
        if self.finished:
            return "finished"
        return f"stopped ({self.stopped})" if self.stopped else "in progress"


@dataclass
class PromotionEvent:
    action: str                    # promote | demote | manifest
    op: str
    candidate: str
    branch: str
    commit: str                    # full sha
    date_utc: str
    author: str
    message: str


@dataclass
class GpuBenchmarks:
    """The scorecard of one card's committed runs (harness.scorecard, `--gpu`): the Benchmarks page
    shows the H200's (SiteData.benchmarks), and each other card with runs gets a page like it."""
    gpu: str                                                # harness.scorecard.GPUS name: "h100"
    benchmarks: list[Any] = field(default_factory=list)     # harness.scorecard.OpCard
    layer_tables: list[Any] = field(default_factory=list)   # harness.scorecard.LayerTable


@dataclass
class SiteData:
    root: str
    generated_utc: str
    ops: list[OpView]
    runs: list[RunView]
    history: list[PromotionEvent]
    history_note: str = ""         # why history is empty (no git, no gitpython)
    warnings: list[str] = field(default_factory=list)
    benchmarks: list[Any] = field(default_factory=list)     # harness.scorecard.OpCard, one per promoted op
    layer_tables: list[Any] = field(default_factory=list)   # harness.scorecard.LayerTable, one per model config and context
    coverage: dict[str, Any] = field(default_factory=dict)  # op -> harness.scorecard.Coverage (ops with a card)
    ledgers: dict[str, list[Any]] = field(default_factory=dict)   # op -> harness.agent.ledger.Measured, in file order
    other_gpus: list[GpuBenchmarks] = field(default_factory=list)  # cards besides the H200 with committed runs

    def op(self, name: str) -> OpView | None:
        return next((o for o in self.ops if o.name == name), None)
