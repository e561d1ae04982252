"""The GPU measurements of perf_sweep (the decisions are perf_sweep.decide).

Per point of the declared scope: the candidate and the incumbent (the op's most specific
promoted kernel covering the point, else the reference path; `_incumbents`) timed by the
toolchain's `time_interleaved`: CUDA-graph replay of many calls, inputs and weights rotated
through copies spanning >= 3 x L2, warm-up, A B B A rounds in one process on one GPU.
The roofline floor is min_bytes / the bandwidth measured in the same run. Then the
per-layer end-to-end A/B: the K3 decode step with the kernel on vs off, CUDA-graph replays
interleaved A B B A (_layer_ab.layer_ab).
"""
from __future__ import annotations

from typing import Any, Callable

from . import GateContext


def _incumbents(ctx: GateContext, scope, arch: str, pts: list) -> dict[str, tuple[str, str]]:
    """Per point key: (who runs it today, who would run it after promotion), each a promoted
    candidate id or "" for the reference. Today: the op's most specific promoted entry covering
    the point, the candidate itself left out (a re-gate times it against what it replaced).
    After: the same with the candidate added and an entry of its exact scope dropped
    (promotion replaces that one), so a point where a narrower promoted kernel keeps running is
    not the candidate's to win or lose."""
    import json

    from harness.registry import KernelEntry, KernelScope, by_specificity

    from .points import key

    manifest = ctx.root / "kernels_generated" / "promoted.json"
    rows = json.loads(manifest.read_text()) if manifest.is_file() else []
    others = [KernelEntry(ctx.op, e["candidate"], KernelScope.from_json(e["scope"]), candidate_dir=manifest.parent)
              for e in rows if e.get("op") == ctx.op and e.get("candidate") != ctx.candidate_id]
    mine = KernelScope.from_json(scope.to_json())
    after = [e for e in others if e.scope != mine] + [KernelEntry(ctx.op, ctx.candidate_id, mine, candidate_dir=manifest.parent)]
    dtype = mine.dtypes[0] if mine.dtypes else "bf16"

    def runs(entries, pt) -> str:
        hit = next((e for e in by_specificity(entries)
                    if e.scope.admits(arch, pt.tp, pt.batch, dtype, pt.state_dtype, pt.shape) is None), None)
        return hit.candidate if hit is not None else ""
    return {key(pt): (runs(others, pt), runs(after, pt)) for pt in pts}


def measure(ctx: GateContext) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str], dict[str, Any]]:
    import torch

    import reference_impls
    from harness.registry import device_arch
    from harness.toolchain import load_compiled
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.compile import static_for_point
    from harness.toolchain.timing import measure_bandwidth, rotation_copies, time_interleaved

    from . import _k3, _layer_ab
    from .points import key, scope_points

    defn = reference_impls.get(ctx.op)
    cand = load_candidate(ctx.op, ctx.candidate_dir)
    arch = device_arch(torch.device("cuda"))
    pts = scope_points(defn, cand.scope)
    required = [key(p) for p in pts]
    if arch not in cand.scope.archs:
        return [], None, required, {"arch": arch, "skipped": f"{arch} is outside the declared archs"}
    c = lambda n: ctx.config.get("perf_sweep", n)  # noqa: E731
    rounds, calls = int(c("repeats")), int(c("calls_per_graph"))
    who = _incumbents(ctx, cand.scope, arch, pts)
    bw = measure_bandwidth()
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 * 2**20))
    points: list[dict[str, Any]] = []
    for pt in pts:
        today, after = who[key(pt)]
        if after != ctx.candidate_id:         # a narrower promoted kernel keeps this point
            points.append({"point": key(pt), "shadowed_by": after})
            continue
        static = static_for_point(defn, pt)
        fn = load_compiled(cand.path, arch, pt.tp, **static)
        inc_fn: Callable[..., None] | None = None
        label = "reference"
        if today:
            inc_fn = load_compiled(ctx.root / "kernels_generated" / ctx.op / today, arch, pt.tp, **static)
            label = f"promoted:{today}"
        g = torch.Generator().manual_seed(pt.batch * 1009 + pt.tp)
        base = defn.make_inputs(pt, g, "cuda")
        per_set = sum(v.numel() * v.element_size() for v in base.values())
        n = rotation_copies(per_set, l2)
        sets = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(n - 1)]
        outs = [defn.alloc_outputs(pt, "cuda") for _ in range(n)]
        outs_inc = [defn.alloc_outputs(pt, "cuda") for _ in range(n)]
        impl_inc: Callable[[int], object]
        if inc_fn is not None:
            f_inc = inc_fn
            impl_inc = lambda i: f_inc(**sets[i], **outs_inc[i])  # noqa: E731
        else:
            impl_inc = lambda i: defn.reference(**sets[i])  # noqa: E731
        impl_cand = lambda i: fn(**sets[i], **outs[i])  # noqa: E731
        st = time_interleaved({"incumbent": impl_inc, "candidate": impl_cand}, n_sets=n,
                              calls_per_graph=calls, rounds=rounds)
        noise = max((s.p90_us - s.p10_us) / (2 * s.median_us) for s in st.values() if s.median_us > 0)
        points.append({"point": key(pt), "incumbent": label, "incumbent_us": st["incumbent"].median_us,
                       "candidate_us": st["candidate"].median_us, "noise_rel": noise,
                       "floor_us": defn.min_bytes(pt) / bw * 1e6, "rotation_copies": n,
                       "rotation_bytes": n * per_set, "stats": {k: v.as_dict() for k, v in st.items()}})
        del sets, outs, outs_inc, base
        torch.cuda.empty_cache()
    layer = None
    layer_error = ""
    try:
        preset, layers = _k3.parse_model_config(ctx.model_config, int(c("layer_model_layers")))
        if preset == "tiny":
            preset = f"k3-tp{cand.scope.tp[0]}-rank"
            layers = int(c("layer_model_layers"))
        pair = _k3.build_pair(ctx.op, ctx.candidate_dir, ctx.root, f"{preset}:{layers}", layers, "cuda")
        layer = _layer_ab.layer_ab(pair, int(c("layer_batch")), rounds, int(c("layer_steps_per_sample")))
        layer["fused_kernels_off"] = list(pair.fused_off)
        if layer["kernel_calls_on"] < 1:
            layer_error = f"per-layer A/B: the kernel never ran with it on ({pair.trace()['errors_on'] or 'no in-scope call'})"
            layer = None
        del pair
    except Exception as exc:  # noqa: BLE001 - recorded; decide() then fails on the missing A/B
        layer_error = f"per-layer A/B failed: {type(exc).__name__}: {exc}"[:400]
    labels = sorted({p["incumbent"] for p in points if "incumbent" in p})
    extra = {"arch": arch, "bandwidth_bytes_per_s": bw, "l2_bytes": l2, "calls_per_graph": calls, "rounds": rounds,
             "incumbent": ", ".join(labels) or "none", "gpu": torch.cuda.get_device_name(0)}
    if layer_error:
        extra["layer_error"] = layer_error
    return points, layer, required, extra
