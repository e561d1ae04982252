"""numerics_unit gate (GPU): the kernel against the fp32 reference at every point in scope.

Per point: >= sets_per_shape fresh random input sets (seeds drawn at run time from the OS,
recorded) plus adversarial sets (ties for top-k, large magnitudes, all-equal rows); outputs
pre-filled with NaN (poison) so an unwritten element fails; NaN/Inf fails; inputs compared
bitwise before/after (no mutation); a second run must be bitwise identical. Tolerances: the
definition's, capped by the frozen per-dtype ceilings in gate_config.toml for the dtype the
output has AT THAT POINT (KDA's state is fp32 or bf16 per point). A candidate whose
compile or launch raises at a point in scope fails (the exception is the reason, the points
after it are not tried: a CUDA fault leaves the context unusable); ERROR stays reserved for
the harness itself failing.
"""
from __future__ import annotations

import secrets
from collections import defaultdict
from typing import Any

from . import GateContext, GateName, GateResult, Verdict

ADVERSARIAL = ("ties", "large", "equal_rows")


def decide(samples: list[dict[str, Any]], required: list[str], sets_per_shape: int) -> tuple[Verdict, list[str]]:
    """samples: {"point", "kind" (random|ties|large|equal_rows), "seed", "ok", "summary",
    "mutated" (names), "deterministic"}. Every required point needs sets_per_shape random
    sets with distinct seeds and each adversarial kind; every sample must be clean."""
    reasons: list[str] = []
    by_point: dict[str, list[dict]] = defaultdict(list)
    for s in samples:
        by_point[s["point"]].append(s)
    for pt in required:
        got = by_point.get(pt, [])
        seeds = {s.get("seed") for s in got if s.get("kind") == "random"}
        n_random = sum(1 for s in got if s.get("kind") == "random")
        if n_random < sets_per_shape or len(seeds) < n_random or None in seeds:
            reasons.append(f"{pt}: {len(seeds)} distinct random input sets, need {sets_per_shape}")
        missing = [k for k in ADVERSARIAL if not any(s.get("kind") == k for s in got)]
        if missing:
            reasons.append(f"{pt}: adversarial sets not run: {', '.join(missing)}")
    for s in samples:
        tag = f"{s['point']} {s.get('kind')} seed={s.get('seed')}"
        if s.get("raised"):
            reasons.append(f"{tag}: raised: {s['raised']}")
        elif not s.get("ok"):
            reasons.append(f"{tag}: wrong: {s.get('summary', '')}")
        if s.get("mutated"):
            reasons.append(f"{tag}: inputs mutated: {', '.join(s['mutated'])}")
        if not s.get("deterministic"):
            reasons.append(f"{tag}: second run not bitwise identical")
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons


def output_dtype(defn, spec, point=None) -> str:
    """The dtype name of output `spec` at `point`: tensors the definition names in
    extra["state_dtype_tensors"] take the point's state dtype, the rest their spec's dtype."""
    if point is not None and spec.name in defn.extra.get("state_dtype_tensors", ()):
        return point.state_dtype
    return spec.dtype


def effective_tolerances(defn, config, point=None) -> dict:
    """The definition's tolerances capped by the frozen per-dtype ceilings, each output capped by
    the ceiling of the dtype it has at `point` (without a point: its spec's dtype). A bf16 state
    held to the fp32 ceiling would fail a kernel one rounding of one element away from the
    reference (tests/gates/test_numerics_unit_tolerances.py)."""
    from dataclasses import replace

    from harness.opdef import CheckKind

    out = {}
    for spec in defn.outputs:
        tol = defn.tolerances[spec.name]
        dtype = output_dtype(defn, spec, point)
        if tol.kind in (CheckKind.ALLCLOSE, CheckKind.REL_NORM) and dtype in ("fp32", "bf16"):
            cap_r = float(config.get("numerics_unit", f"tol_{dtype}_rtol"))
            cap_a = float(config.get("numerics_unit", f"tol_{dtype}_atol"))
            tol = replace(tol, rtol=min(tol.rtol, cap_r), atol=min(tol.atol, cap_a))
        out[spec.name] = tol
    return out


def adversarial(defn, inputs: dict, kind: str, config) -> dict:
    """Transform a random input set into an adversarial one (generic over roles):
    ties: the first tie_group rows of every 2-D weight (and entries of 1-D weights) copied
    from row 0, so tie_group selection keys are exactly equal; large: activations scaled;
    equal_rows: every activation row equals row 0."""
    from harness.opdef import Role

    hook = defn.extra.get("adversarial")
    if callable(hook):
        return hook(inputs, kind)
    out = {k: v.clone() for k, v in inputs.items()}
    n = int(config.get("numerics_unit", "tie_group"))
    for spec in defn.inputs:
        t = out[spec.name]
        if not t.is_floating_point():
            continue
        if kind == "ties" and spec.role is Role.WEIGHT and t.dim() >= 1 and t.shape[0] >= n:
            t[1:n] = t[0:1].expand_as(t[1:n]) if t.dim() > 1 else t[0]
        elif kind == "large" and spec.role is Role.ACTIVATION:
            t.mul_(float(config.get("numerics_unit", "large_magnitude_scale")))
        elif kind == "equal_rows" and spec.role is Role.ACTIVATION and t.dim() >= 2:
            t.copy_(t[0:1].expand_as(t))
    return out


def check_one(defn, fn, point, inputs: dict, tolerances: dict) -> dict[str, Any]:
    """One input set: poisoned outputs, two runs, mutation and determinism checks."""
    import torch

    from dataclasses import replace

    from harness.compare import compare
    from harness.opdef import Role

    state = [s.name for s in defn.inputs if s.role is Role.STATE]
    before = {k: v.clone() for k, v in inputs.items()}
    ref = defn.run_reference(before)
    runs = []
    for _ in range(2):
        work = {k: (before[k].clone() if k in state else inputs[k]) for k in inputs}
        outs = defn.alloc_outputs(point, device=str(next(iter(inputs.values())).device), poison=True)
        fn(**work, **outs)
        torch.cuda.synchronize()
        outs.update({k: work[k] for k in state})
        runs.append(outs)
    mutated = [k for k in inputs if k not in state and not torch.equal(inputs[k], before[k])]
    deterministic = all(torch.equal(runs[0][k], runs[1][k]) for k in runs[0])
    d2 = replace(defn, tolerances={**defn.tolerances, **tolerances})
    res = compare(d2, runs[0], ref, inputs=before)
    return {"ok": res.ok, "summary": res.summary(), "mutated": mutated, "deterministic": deterministic,
            "max_abs_err": {k: t.max_abs_err for k, t in res.tensors.items()},
            "rel_norm_err": {k: t.rel_norm_err for k, t in res.tensors.items()}}


def run(ctx: GateContext) -> GateResult:
    import torch

    name = GateName.NUMERICS_UNIT.value
    if not torch.cuda.is_available():
        return GateResult(name, Verdict.NOT_RUN, ["needs a CUDA GPU"])
    import reference_impls
    from harness.registry import device_arch
    from harness.toolchain import load_compiled
    from harness.toolchain.candidate import load_candidate

    from .points import key, scope_points

    defn = reference_impls.get(ctx.op)
    cand = load_candidate(ctx.op, ctx.candidate_dir)
    arch = device_arch(torch.device("cuda"))
    if arch not in cand.scope.archs:
        return GateResult(name, Verdict.NOT_RUN, [f"this GPU is {arch}, outside the declared archs {list(cand.scope.archs)}"])
    n_sets = int(ctx.config.get("numerics_unit", "sets_per_shape"))
    points = scope_points(defn, cand.scope)
    by_dtype: dict[str, dict] = {}         # the tolerances in force, per state dtype (recorded)
    samples: list[dict[str, Any]] = []
    fns: dict[tuple, Any] = {}
    for pt in points:
        static = {"shape": pt.shape} if pt.shape else {}
        if len(defn.state_dtypes) > 1:
            static["state_dtype"] = pt.state_dtype
        fkey = (pt.tp, tuple(sorted(static.items())))
        tolerances = effective_tolerances(defn, ctx.config, pt)
        by_dtype.setdefault(pt.state_dtype, tolerances)
        seed, kind = 0, "compile"
        try:
            if fkey not in fns:
                fns[fkey] = load_compiled(cand.path, arch, pt.tp, **static)
            fn = fns[fkey]
            for i in range(n_sets + len(ADVERSARIAL)):
                seed = secrets.randbits(63)
                kind = "random" if i < n_sets else ADVERSARIAL[i - n_sets]
                inputs = defn.make_inputs(pt, torch.Generator().manual_seed(seed), "cuda")
                if kind != "random":
                    inputs = adversarial(defn, inputs, kind, ctx.config)
                res = check_one(defn, fn, pt, inputs, tolerances)
                samples.append({"point": key(pt), "kind": kind, "seed": seed, **res})
        except Exception as exc:  # noqa: BLE001 - the candidate's exception is its verdict
            samples.append({"point": key(pt), "kind": kind, "seed": seed, "ok": False, "mutated": [],
                            "deterministic": True, "raised": f"{type(exc).__name__}: {str(exc)[:300]}"})
            break
    required = [key(p) for p in points]
    verdict, reasons = decide(samples, required, n_sets)
    numbers = {"arch": arch, "points": required, "sets_per_shape": n_sets, "samples": samples,
               "tolerances": {sd: {k: {"kind": t.kind.value, "rtol": t.rtol, "atol": t.atol} for k, t in tols.items()}
                              for sd, tols in by_dtype.items()}}
    return GateResult(name, verdict, reasons[:50], numbers)
