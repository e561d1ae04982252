"""numerics_model gate: the K3 decode path with the kernel on vs off, same weights and seed.

Four runs, each with per-step logit error and KL(off || on), and the registry's trace
counters proving the optimized path ran (kernel calls > 0 with the kernel on, 0 with the
kill switch on): long generation (>= 1024 greedy tokens), long context (decode after a
>= 32K-token prefill), seeded sampling (temperature, top-k, top-p), structured output
(grammar-constrained decoding must stay valid). Only a real K3 config on a GPU can pass;
the tiny config on the CPU is a smoke run and is recorded as NOT_RUN.
"""
from __future__ import annotations

from typing import Any

from . import GateContext, GateName, GateResult, Verdict

RUN_KINDS = ("long_generation", "long_context", "sampling", "structured")


def decide(runs: list[dict[str, Any]], config) -> tuple[Verdict, list[str]]:
    """runs: {"kind", "tokens", "context", "greedy_agreement", "sampling_agreement",
    "max_kl", "max_logit_rel_err", "kernel_calls_on", "kernel_calls_off", "valid"}."""
    c = lambda n: config.get("numerics_model", n)  # noqa: E731
    min_calls = int(config.get("isolation", "min_kernel_calls"))
    reasons: list[str] = []
    by_kind = {r.get("kind"): r for r in runs}
    for kind in RUN_KINDS:
        r = by_kind.get(kind)
        if r is None:
            reasons.append(f"{kind}: not run")
            continue
        if int(r.get("kernel_calls_on", 0)) < min_calls:
            reasons.append(f"{kind}: trace shows {r.get('kernel_calls_on', 0)} kernel calls: the optimized path did not run")
        if int(r.get("kernel_calls_off", 0)) != 0:
            reasons.append(f"{kind}: {r['kernel_calls_off']} kernel calls with the kill switch on")
        if float(r.get("max_kl", float("inf"))) > float(c("max_kl")):
            reasons.append(f"{kind}: max per-step KL {r.get('max_kl')} > {c('max_kl')}")
        if float(r.get("max_logit_rel_err", float("inf"))) > float(c("max_logit_rel_err")):
            reasons.append(f"{kind}: max logit rel err {r.get('max_logit_rel_err')} > {c('max_logit_rel_err')}")
    lg = by_kind.get("long_generation")
    if lg is not None:
        if int(lg.get("tokens", 0)) < int(c("long_generation_tokens")):
            reasons.append(f"long_generation: {lg.get('tokens')} tokens < {c('long_generation_tokens')}")
        if float(lg.get("greedy_agreement", 0.0)) < float(c("greedy_agreement_min")):
            reasons.append(f"long_generation: greedy agreement {lg.get('greedy_agreement')} < {c('greedy_agreement_min')}")
    lc = by_kind.get("long_context")
    if lc is not None and int(lc.get("context", 0)) < int(c("long_context_tokens")):
        reasons.append(f"long_context: context {lc.get('context')} < {c('long_context_tokens')}")
    sm = by_kind.get("sampling")
    if sm is not None and float(sm.get("sampling_agreement", 0.0)) < float(c("sampling_agreement_min")):
        reasons.append(f"sampling: agreement {sm.get('sampling_agreement')} < {c('sampling_agreement_min')}")
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
