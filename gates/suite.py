"""Running a set of gates, and re-deriving a recorded verdict from its recorded numbers.

`recheck` is how promotion and CI refuse a forged record: a PASS is accepted only when the
gate's own decision function, fed the numbers in the record and the frozen config, and the
points required by the candidate's scope on disk, also says PASS.
"""
from __future__ import annotations

from typing import Any

from . import ALL_GATES, GPU_GATES, GateContext, GateName, GateResult, Verdict, runner, timed


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def run_gates(ctx: GateContext, only: list[GateName] | None = None, on_done=None) -> list[GateResult]:
    """Run the chosen gates in their fixed order. Without a GPU the GPU gates are reported
    NOT_RUN (never passed), except numerics_model's CPU smoke on the tiny config."""
    chosen = [g for g in ALL_GATES if only is None or g in only]
    has_gpu = gpu_available()
    results = []
    for g in chosen:
        if g in GPU_GATES and not has_gpu and not (g is GateName.NUMERICS_MODEL and ctx.model_config == "tiny"):
            res = GateResult(g.value, Verdict.NOT_RUN, ["needs a CUDA GPU (none on this machine)"])
        elif g in GPU_GATES and has_gpu:
            res = run_sandboxed(g, ctx)
        else:
            res = timed(g, runner(g), ctx)
        results.append(res)
        if on_done:
            on_done(res)
    return results


def run_sandboxed(g: GateName, ctx: GateContext) -> GateResult:
    """A GPU gate in a fresh process group with the frozen deadline (gates/_isolated.py):
    candidate code that hangs or kills its process fails the gate, the harness goes on."""
    import time

    from ._isolated import run_isolated

    t0 = time.perf_counter()
    res = run_isolated(g.value, ctx, float(ctx.config.get("sandbox", f"{g.value}_timeout_s")))
    res.duration_s = round(time.perf_counter() - t0, 3)
    return res


def recheck(gate: str, numbers: dict[str, Any], op: str, scope, config) -> list[str]:
    """Problems with a recorded PASS: what the gate's decision says on the recorded numbers."""
    import reference_impls

    from . import numerics_model, numerics_unit, perf_sweep, static
    from . import scope as scope_gate
    from .points import key, scope_points

    g = GateName(gate)
    if g is GateName.ISOLATION:
        bad = list(numbers.get("outside_paths", ["<missing>"])) + list(numbers.get("frozen_paths_changed", []))
        if not numbers.get("base_commit"):
            bad.append("<no base commit>")
        return [f"isolation numbers do not support a pass: {', '.join(bad)}"] if bad else []
    if g is GateName.STATIC:
        verdict, reasons = static.decide(numbers)
    elif g is GateName.SCOPE:
        verdict, reasons = scope_gate.decide(numbers, list(scope.archs), list(scope.tp))
    else:
        required = [key(p) for p in scope_points(reference_impls.get(op), scope)]
        if g is GateName.NUMERICS_UNIT:
            verdict, reasons = numerics_unit.decide(numbers.get("samples", []), required,
                                                    int(config.get("numerics_unit", "sets_per_shape")))
        elif g is GateName.NUMERICS_MODEL:
            verdict, reasons = numerics_model.decide(numbers.get("runs", []), config)
            if not _is_k3_rank_config(numbers.get("model_config")):
                reasons.append(f"numerics_model ran on '{numbers.get('model_config')}', not a K3 rank config "
                               "(a smoke config, whatever its spelling: tiny, tiny:2, tiny-addnorm)")
        else:
            verdict, reasons, _ = perf_sweep.decide(numbers.get("points", []), numbers.get("layer"), required, config)
    return [f"{gate} numbers do not support a pass: {r}" for r in reasons[:5]] if reasons or verdict is not Verdict.PASS else []


def _is_k3_rank_config(name: object) -> bool:
    """Whether a recorded model_config names a K3 per-rank config (k3-tp8-rank, k3-tp16-rank:3,
    k3-tp8-rank-addnorm, ...): the only configs whose numerics_model pass counts for promotion."""
    from harness.errors import UserError
    from harness.model.config import get_config

    from ._k3 import parse_model_config

    if not isinstance(name, str) or not name:
        return False
    try:
        preset, layers = parse_model_config(name, 1)
        return bool(get_config(preset, layers or None).is_k3_rank)
    except (UserError, ValueError, KeyError):
        return False
