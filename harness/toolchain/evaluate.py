"""Evaluate a candidate: static checks, compile for every arch (cached), then - on a GPU -
correctness and timing at sweep points in a fresh sandboxed worker per candidate.

A worker that hit a CUDA error is never reused (every evaluation gets a new process), and
`Evaluator` runs the canary (a tiny known-good op in yet another fresh process) after a
CUDA_ERROR before it evaluates the next candidate. Without a GPU, the GPU stages are
reported as NOT_RUN, never as passed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..opdef import Point
from .candidate import Candidate
from ..hardware import TARGET_ARCHS
from .compile import COMPILE_OPTIONS, CompileReport, compile_many, static_for_point, static_keys
from .sandbox import run_job
from .static_check import StaticReport, check_candidate
from .timing import roofline_fraction
from .verdict import Verdict

DEFAULT_EVAL_TIMEOUT_S = 600.0
CANARY_TIMEOUT_S = 120.0


@dataclass
class PointResult:
    label: str
    batch: int
    tp: int
    verdict: Verdict
    message: str
    n_input_sets: int = 0
    worst: dict[str, dict[str, float]] = field(default_factory=dict)   # per output: max_abs_err, rel_norm_err
    timing_us: dict[str, dict[str, float]] = field(default_factory=dict)  # impl -> TimingStats.as_dict()
    speedup_vs_reference: float | None = None
    speedup_vs_compiled_reference: float | None = None
    speedup_vs_incumbent: float | None = None
    incumbent_id: str | None = None    # the kernel timed as "incumbent" at this point, if any
    roofline_fraction: float | None = None
    rotation_bytes: int = 0
    context: int = 0
    state_dtype: str = "fp32"
    shape: str = ""

    def point(self):
        """The harness.opdef.Point this result is for."""
        return Point(batch=self.batch, tp=self.tp, context=self.context, state_dtype=self.state_dtype, shape=self.shape)


@dataclass
class EvalReport:
    op: str
    candidate_id: str
    verdict: Verdict                   # the first failing stage's verdict, else OK; NOT_RUN without GPU
    message: str
    static: StaticReport
    compiles: list[CompileReport] = field(default_factory=list)
    gpu_run: bool = False              # False: correctness and timing did NOT run
    gpu: str = ""
    arch: str = ""
    bandwidth_bytes_per_s: float | None = None
    points: list[PointResult] = field(default_factory=list)
    canary_ok: bool | None = None      # set by Evaluator after a CUDA_ERROR
    wall_s: float = 0.0
    worker_log_tail: str = ""
    incumbent_id: str | None = None    # the incumbents passed, ","-joined in try order (PointResult: which ran where)
    incumbent_errors: list[str] = field(default_factory=list)  # points where the incumbent failed to build


def gpu_available() -> bool:
    """True when torch sees a CUDA GPU here (the parent never initialises CUDA itself)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _point_json(defn, pt: Point) -> dict[str, Any]:
    return {"batch": pt.batch, "tp": pt.tp, "context": pt.context, "routing": pt.routing.value,
            "state_dtype": pt.state_dtype, "shape": pt.shape, "static": static_for_point(defn, pt)}


def compile_plan(cand: Candidate, points: list[Point], archs: list[str] | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """The (arch, TP, static key) compiles an evaluation at `points` needs: every arch (default:
    the scope's) x each distinct TP and static key (state dtype, named shape) of the points, the
    builds the GPU worker makes, and no other. `harness eval kda_decode ID --state-dtype bf16` or
    `harness eval skinny_gemm ID --shape mla_qkv_a` so compiles one static key, not the whole
    scope (`harness compile` and the scope gate build that). Without points: the scope's matrix."""
    import reference_impls

    from ..errors import UserError
    from ..opdef import unsupported_tp

    defn = reference_impls.get(cand.op)
    keys: list[tuple[int, dict[str, Any]]] = []
    for p in points:
        if (key := (p.tp, static_for_point(defn, p))) not in keys:
            keys.append(key)
    keys.sort(key=lambda k: k[0])        # by TP (stable: the points' order of static keys within one)
    keys = keys or [(tp, st) for tp in cand.scope.tp for st in static_keys(defn, cand)]
    # compile_matrix's (pinned) refusals, for the plan it does not build
    archs = list(archs or cand.scope.archs)
    for a in archs:
        if a not in TARGET_ARCHS:
            raise UserError(f"unknown arch '{a}' (choose from {', '.join(TARGET_ARCHS)})")
    for tp in sorted({tp for tp, _ in keys}):
        if why := unsupported_tp(tp):
            raise UserError(why)
    return [(a, tp, st) for a in archs for tp, st in keys]


def evaluate_candidate(cand: Candidate, points: list[Point], *, archs: list[str] | None = None,
                       n_input_sets: int = 10, time_it: bool = True, vs_compiled_ref: bool = True,
                       incumbent: Candidate | Sequence[Candidate] | None = None, run_gpu: bool | None = None,
                       timeout_s: float = DEFAULT_EVAL_TIMEOUT_S, compile_timeout_s: float = 300.0,
                       use_cache: bool = True, cache_root: Path | None = None, check_static: bool = True,
                       on_stage: Callable[[str, Any], None] | None = None) -> EvalReport:
    """The whole pipeline for one candidate at `points`.

    Stages: static checks (STATIC_REJECT) -> compile for `archs` (default: the scope's) x
    the points' TPs and static keys, compile_plan (COMPILE_ERROR/CRASH/TIMEOUT) -> on a GPU (run_gpu None = autodetect),
    one sandboxed worker: compile for the device, correctness at every point with
    n_input_sets fresh inputs (WRONG/CUDA_ERROR/CRASH/TIMEOUT), and when time_it, timing of
    kernel vs reference (vs torch.compile'd reference, vs `incumbent`) interleaved A B B A.
    `incumbent`: one candidate, or several in the order a call tries them (the most specific
    first, as the registry does): at each point the first whose scope covers it and whose archs
    include the device's is timed, so a point is compared with the kernel that runs it.
    `on_stage(name, payload)` is called as stages finish (progress bars)."""
    import reference_impls

    t0 = time.perf_counter()
    defn = reference_impls.get(cand.op)
    note = on_stage or (lambda name, payload: None)
    static = check_candidate(cand) if check_static else StaticReport(True, [])
    rep = EvalReport(cand.op, cand.id, Verdict.OK, "", static)
    note("static", static)
    if not static.ok:
        rep.verdict, rep.message = Verdict.STATIC_REJECT, static.summary()
        rep.wall_s = time.perf_counter() - t0
        return rep
    rep.compiles = compile_many(cand, compile_plan(cand, points, archs), timeout_s=compile_timeout_s,
                                use_cache=use_cache, cache_root=cache_root, on_done=lambda r: note("compile", r))
    bad = [c for c in rep.compiles if not c.ok]
    if bad:
        rep.verdict, rep.message = bad[0].verdict, f"{bad[0].arch} TP{bad[0].tp}: {bad[0].message}"
        rep.wall_s = time.perf_counter() - t0
        return rep
    if run_gpu is None:
        run_gpu = gpu_available()
    if not run_gpu:
        rep.verdict, rep.message = Verdict.NOT_RUN, "no GPU here: compiled for every arch; correctness and timing not run"
        rep.wall_s = time.perf_counter() - t0
        return rep
    out_of_scope = [p.label() for p in points if not cand.scope.contains_batch(p.batch) or p.tp not in cand.scope.tp]
    if out_of_scope:
        from ..errors import UserError

        raise UserError(f"points {out_of_scope} are outside the candidate's scope {cand.scope.to_json()}")
    incs = incumbents_list(incumbent)
    job = {"kind": "evaluate", "op": cand.op, "kernel_path": str(cand.kernel_path), "options": COMPILE_OPTIONS,
           "points": [{**_point_json(defn, p), "incumbents": [i for i, c in enumerate(incs) if c.scope.contains(p)]}
                      for p in points], "n_sets": n_input_sets, "time": time_it,
           "vs_compiled_ref": vs_compiled_ref,
           "incumbents": [{"id": c.id, "path": str(c.kernel_path), "archs": list(c.scope.archs)} for c in incs]}
    note("gpu_start", len(points))
    sb = run_job(job, timeout_s)
    rep.gpu_run = True
    rep.worker_log_tail = (sb.stderr[-3000:] if sb.verdict is not Verdict.OK else "")
    p = sb.result or {}
    rep.gpu, rep.arch = p.get("gpu", ""), p.get("arch", "")
    rep.bandwidth_bytes_per_s = p.get("bandwidth_bytes_per_s")
    rep.incumbent_id = ",".join(c.id for c in incs) or None
    rep.incumbent_errors = list(p.get("incumbent_errors", []))
    for pd in p.get("points", []):
        rep.points.append(_point_result(defn, pd, rep.bandwidth_bytes_per_s))
    rep.verdict, rep.message = sb.verdict, sb.message
    note("gpu_done", rep)
    rep.wall_s = time.perf_counter() - t0
    return rep


def incumbents_list(incumbent: Candidate | Sequence[Candidate] | None) -> list[Candidate]:
    """evaluate_candidate's `incumbent` argument as a list in try order."""
    if incumbent is None:
        return []
    return [incumbent] if isinstance(incumbent, Candidate) else list(incumbent)


def _point_result(defn, pd: dict[str, Any], bw: float | None) -> PointResult:
    r = PointResult(pd.get("label", ""), int(pd.get("batch", 0)), int(pd.get("tp", 0)), Verdict(pd["verdict"]),
                    pd.get("message", ""), int(pd.get("n_sets", 0)), pd.get("worst", {}),
                    context=int(pd.get("context", 0)), state_dtype=pd.get("state_dtype", "fp32"),
                    shape=pd.get("shape", ""), incumbent_id=pd.get("incumbent_id"))
    t = pd.get("timing")
    if t:
        st = t["stats"]
        r.timing_us = st
        r.rotation_bytes = int(t.get("rotation_bytes", 0))
        k = st["kernel"]["median_us"]
        for impl, attr in (("reference", "speedup_vs_reference"), ("compiled_reference", "speedup_vs_compiled_reference"),
                           ("incumbent", "speedup_vs_incumbent")):
            if impl in st and k > 0:
                setattr(r, attr, st[impl]["median_us"] / k)
        if bw:
            r.roofline_fraction = roofline_fraction(defn.min_bytes(r.point()), bw, k)
    return r


def run_canary(timeout_s: float = CANARY_TIMEOUT_S) -> bool:
    """A tiny known-good GPU op in a fresh process: True when the GPU is healthy."""
    sb = run_job({"kind": "canary"}, timeout_s)
    return sb.verdict is Verdict.OK


class Evaluator:
    """Evaluates candidates one after another. Each gets a fresh worker process; after a
    CUDA_ERROR the canary must pass before the next candidate runs (else GpuUnhealthy)."""

    def __init__(self, **defaults: Any) -> None:
        self.defaults = defaults
        self.needs_canary = False
        self.canary_runs = 0

    def evaluate(self, cand: Candidate, points: list[Point], **kw: Any) -> EvalReport:
        if self.needs_canary:
            self.canary_runs += 1
            if not run_canary():
                raise GpuUnhealthy("the canary failed after a CUDA error: the GPU needs attention")
            self.needs_canary = False
        rep = evaluate_candidate(cand, points, **{**self.defaults, **kw})
        if rep.verdict is Verdict.CUDA_ERROR:
            self.needs_canary = True
            rep.canary_ok = None
        return rep


class GpuUnhealthy(RuntimeError):
    """The canary failed: stop evaluating on this GPU."""
