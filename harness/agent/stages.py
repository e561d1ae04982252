"""The candidate pipeline seen from the agent loop: static checks, compile per arch,
evaluation on the GPU. Everything here calls harness.toolchain (never copies it) and turns
its reports into the loop's records (records.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .records import CompileInfo, EvalInfo, Mismatch, StageStatus, Timing, trim_error


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@dataclass
class StaticResult:
    ok: bool
    problems: list[str]


class ToolchainStages:
    """Runs each stage through harness.toolchain. `compile_tp` is the TP the search compiles
    at (the full TP matrix is compiled by the gates)."""

    def __init__(self, gpu_name: str = "h200", compile_tp: int = 8, compile_timeout_s: float = 300.0,
                 eval_timeout_s: float = 600.0, use_gpu: bool | None = None):
        self.gpu_name = gpu_name
        self.compile_tp = compile_tp
        self.compile_timeout_s = compile_timeout_s
        self.eval_timeout_s = eval_timeout_s
        self.has_gpu = gpu_available() if use_gpu is None else use_gpu

    def static(self, cand) -> StaticResult:
        from ..toolchain.static_check import check_candidate

        rep = check_candidate(cand)
        return StaticResult(rep.ok, [str(f) for f in rep.findings])

    def compile(self, cand, arch: str) -> CompileInfo:
        from ..toolchain.compile import compile_candidate

        rep = compile_candidate(cand, arch, search_tp(cand, self.compile_tp), None, timeout_s=self.compile_timeout_s)
        ld128 = (rep.global_loads_by_bits or {}).get("128")
        if rep.ok:
            return CompileInfo(arch, StageStatus.OK, rep.max_registers, rep.spill_bytes, ld128,
                               rep.compile_s, rep.cache_hit)
        err = rep.message + ("\n" + rep.diagnostics if rep.diagnostics else "")
        return CompileInfo(arch, StageStatus.FAILED, seconds=rep.compile_s, cached=rep.cache_hit,
                           error=trim_error(f"[{rep.verdict.value}] {err}"))

    def evaluate(self, cand) -> EvalInfo:
        """Correctness and timing on the GPU at the search points (toolchain.evaluate)."""
        if not self.has_gpu:
            return EvalInfo(StageStatus.NOT_RUN, "NOT_RUN", "no CUDA GPU on this machine")
        from ..toolchain.evaluate import evaluate_candidate

        points = search_points(cand, self.compile_tp)
        incumbents = promoted_incumbents(cand, points)
        rep = evaluate_candidate(cand, points, archs=list(cand.scope.archs), check_static=False, run_gpu=True,
                                 incumbent=incumbents,
                                 timeout_s=self.eval_timeout_s, compile_timeout_s=self.compile_timeout_s)
        return eval_info_from_report(rep, self.gpu_name, covered_points(incumbents, points, rep.arch))


SEARCH_BATCHES = (1, 8, 64)        # batches timed during the search; the perf gate sweeps all
POINT_CONTEXT = 1024               # tokens of KV cache at a single check of an op that reads one
                                   # (search, prompts, `harness eval`); the gates sweep opdef.SWEEP_CONTEXTS


def search_tp(cand, tp: int) -> int:
    """The TP the search compiles and runs a candidate at: `tp`, or its smallest TP when its
    scope leaves `tp` out (a TP16-only kernel is never built for TP8)."""
    return tp if tp in cand.scope.tp else min(cand.scope.tp)


def search_points(cand, tp: int) -> list:
    """Where the search checks and times a candidate: SEARCH_BATCHES inside its scope, at `tp`
    (or its smallest TP when `tp` is outside it), at every state dtype and named shape it
    declares (a draft wrong only in bf16 state or on one GEMM shape is caught here, not at the
    gates), with a 1024-token context for ops that read a KV cache."""
    import reference_impls

    from ..opdef import Point

    defn = reference_impls.get(cand.op)
    sc = cand.scope
    tp = search_tp(cand, tp)
    states = [s for s in (sc.state_dtypes or defn.state_dtypes[:1]) if s in defn.state_dtypes]
    shapes = list(sc.shapes) or [""]
    ctx = POINT_CONTEXT if defn.uses_context else 0
    return [Point(batch=b, tp=tp, context=ctx, state_dtype=s, shape=sh)
            for b in SEARCH_BATCHES if sc.contains_batch(b) for s in states for sh in shapes]


def promoted_candidate(op: str) -> Any:
    """The op's promoted kernel (kernels_generated/promoted.json; its broadest entry when it has
    several) as a loaded Candidate, or None when the op has none or its entry cannot be loaded
    (the search then goes on without it)."""
    from ..errors import UserError
    from ..paths import root
    from ..promotion import primary_entries, read_manifest
    from ..toolchain.candidate import load_candidate

    try:
        entry = primary_entries(read_manifest(root())).get(op)
        return load_candidate(op, entry["candidate"]) if entry else None
    except (UserError, OSError, ValueError, KeyError):
        return None


def promoted_incumbents(cand, points) -> list[Any]:
    """The op's promoted kernels to time beside `cand` at the search points, so every draft is
    measured against what it would replace, point by point: the manifest's entries in the order a
    call tries them (`promotion.kernel_entries`: the most specific first), each loaded, those whose
    scope covers at least one of the points, `cand` itself left out. The worker times at each point
    the first that covers it (at mla_qkv_a the narrow skinny kernel, elsewhere the broad one), and
    none where none does (production runs the reference there, and no kernel may be called).
    Empty when the op has none; an entry that cannot be loaded is left out (the search goes on)."""
    from ..errors import UserError
    from ..paths import root
    from ..promotion import kernel_entries, read_manifest
    from ..toolchain.candidate import load_candidate

    try:
        entries = kernel_entries(read_manifest(root())).get(cand.op, [])
    except (UserError, OSError, ValueError, KeyError):
        return []
    out = []
    for e in entries:
        if e.candidate == cand.id:
            continue
        try:
            inc = load_candidate(cand.op, e.candidate)
        except (UserError, OSError, ValueError, KeyError):
            continue
        if any(inc.scope.contains(p) for p in points):
            out.append(inc)
    return out


def covered_points(incumbents: list[Any], points: list[Any], arch: str = "") -> set[Any]:
    """The points some promoted kernel runs on a device of `arch` (its scope covers the point and
    declares the arch: gpu_eval.runs_on, the rule the GPU worker times by); the reference runs the
    rest there. A kernel built for sm_103a alone is not called on an H200, so the reference is what
    a draft must beat there. `arch` "" (not known): scope alone decides."""
    from ..toolchain.gpu_eval import runs_on

    here = [inc for inc in incumbents if not arch or runs_on(inc.scope.archs, arch)]
    return {p for p in points if any(inc.scope.contains(p) for inc in here)}


def eval_info_from_report(rep: Any, gpu_name: str, covered: set[Any] | None = None) -> EvalInfo:
    """harness.toolchain.evaluate.EvalReport -> EvalInfo (mismatches; kernel, reference, torch.compile
    and promoted-kernel times). `covered`: the points a promoted kernel covers (covered_points), so
    each Timing knows whether the promoted kernel or the reference runs it today; None: unknown."""
    import reference_impls

    from ..hardware import gpu, roofline

    defn = reference_impls.get(rep.op)
    verdict = getattr(rep.verdict, "value", str(rep.verdict))
    mismatches, timings = [], []
    for pr in rep.points:
        pv = getattr(pr.verdict, "value", str(pr.verdict))
        if pv != "OK":
            for name, w in (pr.worst or {}).items():
                mismatches.append(Mismatch(name, f"{pr.label}: {pr.message}"[:300], float(w.get("max_abs_err", 0.0)),
                                           float(w.get("rel_norm_err", 0.0)), list(w.get("elements", []))[:5]))
            if not pr.worst:
                mismatches.append(Mismatch("-", f"{pr.label}: {pr.message}"[:300]))
        st = pr.timing_us or {}
        if "kernel" in st:
            pt = pr.point()
            floor = roofline(defn.flops(pt), defn.min_bytes(pt), gpu(gpu_name)).floor_us
            timings.append(Timing(pr.batch, pr.tp, float(st["kernel"]["median_us"]),
                                  incumbent_us=st.get("incumbent", {}).get("median_us"), floor_us=floor,
                                  incumbent_id=pr.incumbent_id if "incumbent" in st else None,
                                  compiled_us=st.get("compiled_reference", {}).get("median_us"),
                                  reference_us=st.get("reference", {}).get("median_us"),
                                  state_dtype=pt.state_dtype, shape=pt.shape,
                                  covered=None if covered is None else pt in covered))
    status = StageStatus.OK if verdict == "OK" else (StageStatus.NOT_RUN if verdict == "NOT_RUN" else StageStatus.FAILED)
    detail = rep.message + (("\n" + rep.worker_log_tail) if verdict not in ("OK", "WRONG") and rep.worker_log_tail else "")
    if rep.incumbent_errors:
        detail += "\n(promoted kernel not timed at " + "; ".join(rep.incumbent_errors)[:400] + ")"
    # the ids actually timed, in the order the report passed them (a call's try order)
    timed = {t.incumbent_id for t in timings if t.incumbent_us is not None}
    named = [i for i in (rep.incumbent_id or "").split(",") if i in timed]
    return EvalInfo(status, verdict, trim_error(detail, 1500), mismatches[:8], timings,
                    incumbent=",".join(named) or None)
