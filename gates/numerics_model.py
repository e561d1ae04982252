"""numerics_model gate: the K3 decode path with the kernel on vs off, same weights and seed.

Four runs, each with per-step logit error and KL(off || on), and the registry's trace
counters proving the optimized path ran (kernel calls > 0 with the kernel on, 0 with the
kill switch on): long generation (>= 1024 greedy tokens), long context (decode after a
>= 32K-token prefill), seeded sampling (temperature, top-k, top-p), structured output
(grammar-constrained decoding must stay valid). Only a real K3 config on a GPU can pass;
the tiny config on the CPU is a smoke run and is recorded as NOT_RUN.

Drift is judged against the model's own noise floor, measured in the same run: a third
path runs the op through a benign perturbation of its reference (another fp32 summation
order, gates/_benign.py). Any legitimate change of rounding can flip a near-tie (one expert
among 896, one greedy token); the flipped hidden state lives on in KDA states and MLA
caches, so a correct kernel drifts like the benign path, not like zero. The allowance of a
drift statistic is max(absolute floor, noise_factor x the noise paths' value); a run that
recorded no noise path is held to the absolute floors alone.

The noise paths' value is pooled over the four runs (the largest max, the step-weighted
mean): all four decode the same model with the same benign perturbation, so they sample one
distribution, and whether a near-tie flips within a short run is a matter of luck. On the
H200 the promoted router 876e93 and the noise path flipped 76 and 79 experts in the long
generation, 22 and 21 in sampling; in the 32-step long-context run the kernel flipped 2 and
the noise path none, and that run's own noise value (2.5e-5 KL, no flip) failed a kernel that
drifted like the noise path did everywhere else. Pooled, every run is held to what the benign
path did somewhere in the same gate run (most of its steps are the long generation's).
"""
from __future__ import annotations

from typing import Any

from . import GateContext, GateName, GateResult, Verdict

RUN_KINDS = ("long_generation", "long_context", "sampling", "structured")

# statistic of a run -> its absolute floor in the config (drift stats, judged against noise)
DRIFT_STATS = (("max_kl", "max_kl"), ("mean_kl", "mean_kl"), ("max_logit_rel_err", "max_logit_rel_err"))


def allowance(run: dict[str, Any], stat: str, floor: float, factor: float, pooled: float = 0.0) -> float:
    """What `stat` of a run may reach: the floor, or factor x the noise path's value (this
    run's, or `pooled` over every run's noise path where that is larger)."""
    noise = run.get("noise") or {}
    return max(floor, factor * max(float(noise.get(stat, 0.0) or 0.0), pooled))


def pooled_noise(runs: list[dict[str, Any]], stat: str) -> float:
    """`stat` of the noise paths of all runs together: the largest max_* value, and mean_kl
    weighted by each noise path's steps (its per-step series, else the run's tokens).
    0.0 when no run has a noise path."""
    measured = [r for r in runs if r.get("noise") and r["noise"].get(stat) is not None]
    if not measured:
        return 0.0
    values = [float(r["noise"][stat] or 0.0) for r in measured]
    if not stat.startswith("mean_"):
        return max(values)
    steps = [len(r["noise"].get("kl_per_step") or []) or int(r.get("tokens", 0) or 0) for r in measured]
    if sum(steps) == 0:
        return max(values)
    return sum(v * s for v, s in zip(values, steps)) / sum(steps)


def _agreement_min(run: dict[str, Any], stat: str, abs_min: float, margin: float) -> float:
    """The kernel's agreement may not fall below the noise path's by more than `margin`
    (and never needs to exceed `abs_min`: that is the bar when the noise path never flips)."""
    noise = run.get("noise") or {}
    if stat not in noise:
        return abs_min
    return min(abs_min, float(noise[stat]) - margin)


def decide(runs: list[dict[str, Any]], config) -> tuple[Verdict, list[str]]:
    """runs: {"kind", "tokens", "context", "greedy_agreement", "sampling_agreement", "max_kl",
    "mean_kl", "max_logit_rel_err", "kernel_calls_on", "kernel_calls_off", "nonfinite_steps",
    "valid", "noise": {the same drift statistics of the benign path, "calls"}}."""
    c = lambda n: config.get("numerics_model", n)  # noqa: E731
    min_calls = int(config.get("isolation", "min_kernel_calls"))
    factor = float(c("noise_factor"))
    reasons: list[str] = []
    by_kind = {r.get("kind"): r for r in runs}
    pooled = {stat: pooled_noise(runs, stat) for stat, _ in DRIFT_STATS}
    for kind in RUN_KINDS:
        r = by_kind.get(kind)
        if r is None:
            reasons.append(f"{kind}: not run")
            continue
        if int(r.get("kernel_calls_on", 0)) < min_calls:
            reasons.append(f"{kind}: trace shows {r.get('kernel_calls_on', 0)} kernel calls: the optimized path did not run")
        if int(r.get("kernel_calls_off", 0)) != 0:
            reasons.append(f"{kind}: {r['kernel_calls_off']} kernel calls with the kill switch on")
        if int(r.get("nonfinite_steps", 0)) != 0:
            reasons.append(f"{kind}: {r['nonfinite_steps']} steps with NaN/Inf logits with the kernel on")
        noise = r.get("noise")
        if noise is not None and int(noise.get("calls", 0)) < min_calls:
            reasons.append(f"{kind}: the noise path's perturbation ran {noise.get('calls', 0)} times: no noise floor")
        for stat, floor_name in DRIFT_STATS:
            if stat not in r and stat == "mean_kl":
                continue                     # records before per-step series: max stats only
            got = float(r.get(stat, float("inf")))
            allowed = allowance(r, stat, float(c(floor_name)), factor, pooled[stat] if noise else 0.0)
            if not got <= allowed:
                ref = f" (noise path {noise.get(stat)}, all runs' {pooled[stat]:.4g})" if noise else ""
                reasons.append(f"{kind}: {stat} {got:.4g} > allowed {allowed:.4g}{ref}")
    lg = by_kind.get("long_generation")
    if lg is not None:
        if int(lg.get("tokens", 0)) < int(c("long_generation_tokens")):
            reasons.append(f"long_generation: {lg.get('tokens')} tokens < {c('long_generation_tokens')}")
        need = _agreement_min(lg, "greedy_agreement", float(c("greedy_agreement_min")), float(c("agreement_margin")))
        if float(lg.get("greedy_agreement", 0.0)) < need:
            reasons.append(f"long_generation: greedy agreement {lg.get('greedy_agreement')} < {need:.4g}")
    lc = by_kind.get("long_context")
    if lc is not None and int(lc.get("context", 0)) < int(c("long_context_tokens")):
        reasons.append(f"long_context: context {lc.get('context')} < {c('long_context_tokens')}")
    sm = by_kind.get("sampling")
    if sm is not None:
        need = _agreement_min(sm, "sampling_agreement", float(c("sampling_agreement_min")), float(c("agreement_margin")))
        if float(sm.get("sampling_agreement", 0.0)) < need:
            reasons.append(f"sampling: agreement {sm.get('sampling_agreement')} < {need:.4g}")
    st = by_kind.get("structured")
    if st is not None and not st.get("valid", False):
        reasons.append("structured: output with the kernel on violates the grammar")
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons


def run(ctx: GateContext) -> GateResult:
    import torch

    name = GateName.NUMERICS_MODEL.value
    on_gpu = torch.cuda.is_available()
    if not on_gpu and ctx.model_config != "tiny":
        return GateResult(name, Verdict.NOT_RUN, ["a real K3 config needs a CUDA GPU"])
    from ._model_runs import model_runs

    runs, extra = model_runs(ctx, device="cuda" if on_gpu else "cpu")
    verdict, reasons = decide(runs, ctx.config)
    numbers = {"model_config": ctx.model_config, "device": "cuda" if on_gpu else "cpu", "runs": runs, **extra}
    if ctx.model_config == "tiny":
        smoke = "smoke passed" if verdict is Verdict.PASS else "smoke failed: " + "; ".join(reasons[:3])
        return GateResult(name, Verdict.NOT_RUN, [f"tiny config is a smoke run ({smoke}); a real K3 config on a GPU decides"],
                          numbers)
    return GateResult(name, verdict, reasons, numbers)
