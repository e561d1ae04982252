"""Reading the numbers of gate records into plot- and table-ready views.

The gates own the shape of their numbers (gates/*.py): perf_sweep records "points"
({point, incumbent_us, candidate_us, noise_rel, floor_us}) and "per_point" ({point,
speedup, roofline_fraction}); numerics_model records "runs"; scope records "compiles";
trace counters are rows of harness.registry.counter_rows ({op, outcome, reason, count}).
Per-step drift is any list of numbers in a model run whose name says kl or logit error.
"""
from __future__ import annotations

import math
import re
from typing import Any

from .model import CompileFact, CounterRow, DriftSeries, ModelRunView, SweepPoint

_BATCH_RE = re.compile(r"(?:^|\s)B=(\d+)(?:\s|$)")
_TP_RE = re.compile(r"(?:^|\s)TP(\d+)(?:\s|$)")
_DEFAULT_AXES = ("L=0", "uniform", "state=-", "shape=-")


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(f) if f is not None else None


def parse_point(label: str) -> tuple[int | None, int | None, list[str]]:
    """(batch, tp, the other axes' tokens) of a gates.points.key label."""
    b = _BATCH_RE.search(label)
    t = _TP_RE.search(label)
    rest = [tok for tok in label.split() if not tok.startswith("B=") and not re.fullmatch(r"TP\d+", tok)]
    return (int(b.group(1)) if b else None, int(t.group(1)) if t else None, rest)


def sweep_points(numbers: dict[str, Any]) -> list[SweepPoint]:
    """One point per measured sweep point; speedup = incumbent / candidate time and
    roofline fraction = floor / candidate time (the gate's definitions), taken from the
    gate's derived numbers where recorded."""
    derived = {d.get("point"): d for d in numbers.get("per_point", []) if isinstance(d, dict)}
    raw = [p for p in numbers.get("points", []) if isinstance(p, dict) and "point" in p]
    parsed = []
    for p in raw:
        label = str(p["point"])
        batch, tp, rest = parse_point(label)
        if batch is None:
            batch = _int(p.get("batch"))
        if tp is None:
            tp = _int(p.get("tp"))
        if batch is None or tp is None:
            continue
        parsed.append((p, label, batch, tp, rest))
    # series: TP plus whichever other axes vary (routing profile, context, state dtype, shape)
    varying: set[str] = set()
    if parsed:
        rests: list[set[str]] = [set(r) for *_, r in parsed]
        varying = set[str]().union(*rests) - rests[0].intersection(*rests[1:])
    out = []
    for p, label, batch, tp, rest in parsed:
        extra = [t for t in rest if t in varying]
        d = derived.get(label, {})
        inc, cand, floor = _num(p.get("incumbent_us")), _num(p.get("candidate_us")), _num(p.get("floor_us"))
        speed = _num(d.get("speedup"))
        if speed is None and inc and cand:
            speed = inc / cand
        frac = _num(d.get("roofline_fraction"))
        if frac is None and floor is not None and cand:
            frac = floor / cand
        out.append(SweepPoint(key=label, tp=tp, batch=batch, series=" ".join([f"TP{tp}", *extra]),
                              speedup=speed, roofline_fraction=frac, candidate_us=cand, incumbent_us=inc,
                              floor_us=floor, noise_rel=_num(p.get("noise_rel"))))
    return sorted(out, key=lambda s: (s.series, s.batch))


def compile_facts(numbers: dict[str, Any], source: str) -> list[CompileFact]:
    """The scope gate's compile matrix (arch x TP x static key)."""
    out = []
    for c in numbers.get("compiles", []):
        if not isinstance(c, dict):
            continue
        static = c.get("static") or {}
        msg = str(c.get("message", ""))
        if static:
            msg = (", ".join(f"{k}={v}" for k, v in sorted(static.items())) + ("; " + msg if msg else ""))
        out.append(CompileFact(arch=str(c.get("arch", "?")), tp=_int(c.get("tp")), verdict=str(c.get("verdict", "?")),
                               message=msg, compile_s=_num(c.get("compile_s")), source=source))
    return out


def run_compile_facts(rec: dict[str, Any], run_id: str) -> list[CompileFact]:
    """Compile facts of an agent run's candidate record (runs/<id>/candidates/<cid>.json):
    registers, spilled bytes and 128-bit global loads per arch."""
    out = []
    for arch, c in sorted((rec.get("compile") or {}).items()):
        if not isinstance(c, dict):
            continue
        out.append(CompileFact(arch=arch, tp=None, verdict=str(c.get("status", "?")), message=str(c.get("error", ""))[:300],
                               compile_s=_num(c.get("seconds")), registers=_int(c.get("registers")),
                               spill_bytes=_int(c.get("spill_bytes")), ld128=_int(c.get("ld128")),
                               source=f"run {run_id}"))
    return out


def _flip_total(v: Any) -> int | None:
    """Sum of a per-step expert-flip series (None when not recorded)."""
    if not isinstance(v, list):
        return None
    vals = [_int(x) for x in v]
    return sum(x for x in vals if x is not None)


def model_runs(numbers: dict[str, Any]) -> list[ModelRunView]:
    """One view per numerics_model run, with the noise path's max KL and both paths' expert
    flips beside the kernel's drift: a correct kernel flips near-tied experts about as often as
    the benign perturbation does."""
    out = []
    for r in numbers.get("runs", []):
        if not isinstance(r, dict):
            continue
        valid = r.get("valid")
        noise_raw = r.get("noise")
        noise: dict[str, Any] = noise_raw if isinstance(noise_raw, dict) else {}
        out.append(ModelRunView(kind=str(r.get("kind", "?")), tokens=_int(r.get("tokens")), context=_int(r.get("context")),
                                greedy_agreement=_num(r.get("greedy_agreement")),
                                sampling_agreement=_num(r.get("sampling_agreement")), max_kl=_num(r.get("max_kl")),
                                max_logit_rel_err=_num(r.get("max_logit_rel_err")),
                                kernel_calls_on=_int(r.get("kernel_calls_on")),
                                kernel_calls_off=_int(r.get("kernel_calls_off")),
                                valid=valid if isinstance(valid, bool) else None,
                                noise_max_kl=_num(noise.get("max_kl")),
                                expert_flips=_flip_total(r.get("expert_flips_per_step")),
                                noise_expert_flips=_flip_total(noise.get("expert_flips_per_step"))))
    return out


def _metric_name(key: str) -> str | None:
    k = key.lower()
    if "kl" in k.split("_") or k.startswith("kl"):
        return "kl"
    if "logit" in k:
        return "logit_rel_err"
    return None


def drift_series(numbers: dict[str, Any]) -> list[DriftSeries]:
    """Per-step error curves of each model run: lists of numbers under a key naming kl or
    logit error (e.g. "kl_per_step"), or a "per_step" list of {step, kl, logit_rel_err}."""
    out = []
    for r in numbers.get("runs", []):
        if not isinstance(r, dict):
            continue
        kind = str(r.get("kind", "?"))
        for k, v in sorted(r.items()):
            name = _metric_name(k)
            if name and isinstance(v, list) and len(v) > 1 and all(_num(x) is not None for x in v):
                out.append(DriftSeries(kind, name, [float(x) for x in v]))
        steps = r.get("per_step")
        if isinstance(steps, list) and steps and all(isinstance(s, dict) for s in steps):
            for k in sorted({k for s in steps for k in s} - {"step"}):
                name = _metric_name(k)
                vals = [_num(s.get(k)) for s in steps]
                if name and len(vals) > 1 and all(v is not None for v in vals):
                    out.append(DriftSeries(kind, name, [float(v) for v in vals if v is not None]))
    return out


def counter_rows(obj: Any, where: str = "") -> list[CounterRow]:
    """Every trace-counter row ({op, outcome, reason, count}) anywhere inside `obj`."""
    out: list[CounterRow] = []
    if isinstance(obj, dict):
        if {"op", "outcome", "reason", "count"} <= set(obj) and _int(obj.get("count")) is not None:
            return [CounterRow(where or "-", str(obj["op"]), str(obj["outcome"]), str(obj["reason"]), int(obj["count"]))]
        if isinstance(obj.get("kind"), str):
            where = f"{where} {obj['kind']}".strip()
        for k, v in obj.items():          # the path names the run and the side (trace on / off)
            out += counter_rows(v, where if k in ("runs", "counters", "trace") else f"{where} {k}".strip())
    elif isinstance(obj, list):
        for v in obj:
            out += counter_rows(v, where)
    return out
