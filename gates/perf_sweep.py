"""perf_sweep gate (GPU): every point of the declared scope, candidate vs incumbent.

The incumbent at each point is what runs there today: the op's most specific promoted
kernel covering it, else the reference path. A point where a narrower promoted kernel would
keep running after this candidate's promotion is recorded as shadowed ({"point",
"shadowed_by"}) and not timed: the candidate never runs there. Timing (CUDA-graph replay, buffers rotated past L2, warm-up, A B B A interleaving in
one process) is the toolchain's; this gate decides:
- no point slower than the incumbent by more than max(noise floor, k x measured noise);
- geometric-mean speedup >= the configured margin;
- each point's fraction of the HBM roofline (bytes / measured bandwidth) is reported, and
  a time below the floor (beyond a small slack) is rejected as suspect;
- end-to-end: per-layer decode time of the K3 stack with the kernel on vs off.
"""
from __future__ import annotations

import math
from typing import Any

from . import GateContext, GateName, GateResult, Verdict


def decide(points: list[dict[str, Any]], layer: dict[str, Any] | None, required: list[str],
           config) -> tuple[Verdict, list[str], dict[str, Any]]:
    """points: {"point", "incumbent_us", "candidate_us", "noise_rel", "floor_us"}, or {"point",
    "shadowed_by"} where a narrower promoted kernel runs; layer: {"on_us", "off_us", "noise_rel"}.
    Returns verdict, reasons, derived numbers."""
    c = lambda n: float(config.get("perf_sweep", n))  # noqa: E731
    reasons: list[str] = []
    seen = {p["point"] for p in points}
    reasons += [f"{r}: not measured" for r in required if r not in seen]
    shadowed = [p for p in points if "shadowed_by" in p]
    reasons += [f"{p['point']}: shadowed by no candidate" for p in shadowed
                if not (isinstance(p["shadowed_by"], str) and p["shadowed_by"])]
    if points and len(shadowed) == len(points):
        reasons.append("every point runs a narrower promoted kernel: the candidate would never run")
    speedups, derived = [], []
    for p in points:
        if "shadowed_by" in p:
            continue
        inc, cand, floor = float(p["incumbent_us"]), float(p["candidate_us"]), float(p["floor_us"])
        if not (inc > 0 and cand > 0 and floor >= 0 and math.isfinite(inc) and math.isfinite(cand)):
            reasons.append(f"{p['point']}: invalid timing (incumbent {inc}, candidate {cand})")
            continue
        allow = max(c("noise_floor_rel"), c("noise_multiplier") * float(p.get("noise_rel", 0.0)))
        speedup = inc / cand
        speedups.append(speedup)
        frac = floor / cand if cand else 0.0
        derived.append({"point": p["point"], "speedup": speedup, "roofline_fraction": frac, "allowance_rel": allow})
        if cand > inc * (1 + allow):
            reasons.append(f"{p['point']}: regression {cand:.2f} us vs incumbent {inc:.2f} us "
                           f"(+{(cand / inc - 1) * 100:.1f}% > noise allowance {allow * 100:.1f}%)")
        if floor > 0 and cand < floor * (1 - c("roofline_slack")):
            reasons.append(f"{p['point']}: {cand:.2f} us is faster than the HBM roofline floor {floor:.2f} us: suspect")
        if frac < c("min_roofline_fraction"):
            reasons.append(f"{p['point']}: roofline fraction {frac:.2f} below {c('min_roofline_fraction')}")
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else 0.0
    if speedups and geomean < c("geomean_margin"):
        reasons.append(f"geometric-mean speedup {geomean:.3f} < required {c('geomean_margin'):.3f}")
    if not points:
        reasons.append("no points measured")
    if layer is None:
        reasons.append("no end-to-end per-layer A/B measured")
    else:
        on, off = float(layer["on_us"]), float(layer["off_us"])
        allow = max(c("layer_regression_rel"), c("noise_multiplier") * float(layer.get("noise_rel", 0.0)))
        if not (on > 0 and off > 0):
            reasons.append(f"per-layer A/B invalid (on {on}, off {off})")
        elif on > off * (1 + allow):
            reasons.append(f"per-layer decode {on:.1f} us with the kernel vs {off:.1f} us without (+{(on / off - 1) * 100:.1f}%)")
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons, {"geomean_speedup": geomean, "per_point": derived}


def run(ctx: GateContext) -> GateResult:
    import torch

    name = GateName.PERF_SWEEP.value
    if not torch.cuda.is_available():
        return GateResult(name, Verdict.NOT_RUN, ["needs a CUDA GPU"])
    from ._perf_gpu import measure

    points, layer, required, extra = measure(ctx)
    verdict, reasons, derived = decide(points, layer, required, ctx.config)
    if extra.get("layer_error"):
        reasons.append(str(extra["layer_error"]))
    numbers = {"points": points, "layer": layer, "required": required, **derived, **extra}
    return GateResult(name, verdict, reasons, numbers)
