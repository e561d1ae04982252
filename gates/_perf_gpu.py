"""The GPU measurements of perf_sweep (the decisions are perf_sweep.decide).

Per point of the declared scope: the candidate and the incumbent (the op's promoted kernel
when one is promoted and covers the point, else the reference path) timed by the
toolchain's `time_interleaved`: CUDA-graph replay of many calls, inputs and weights rotated
through copies spanning >= 3 x L2, warm-up, A B B A rounds in one process on one GPU.
The roofline floor is min_bytes / the bandwidth measured in the same run. Then the
per-layer end-to-end A/B: the K3 decode step with the kernel on vs off, CUDA-graph replays
interleaved A B B A (_layer_ab.layer_ab).
"""
from __future__ import annotations

from typing import Any, Callable

from . import GateContext


def _incumbent(ctx: GateContext, arch: str):
    """(label, manifest entry or None): the promoted kernel of this op, unless it is this candidate."""
    import json

    manifest = ctx.root / "kernels_generated" / "promoted.json"
    if manifest.is_file():
        for e in json.loads(manifest.read_text()):
            if e.get("op") == ctx.op and e.get("candidate") != ctx.candidate_id and arch in e["scope"].get("archs", []):
                return f"promoted:{e['candidate']}", e
    return "reference", None


def measure(ctx: GateContext) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str], dict[str, Any]]:
    import torch

    import reference_impls
    from harness.registry import KernelScope, device_arch
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
    inc_label, inc_entry = _incumbent(ctx, arch)
    inc_scope = KernelScope.from_json(inc_entry["scope"]) if inc_entry else None
    bw = measure_bandwidth()
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 * 2**20))
    points: list[dict[str, Any]] = []
    for pt in pts:
        static = static_for_point(defn, pt)
        fn = load_compiled(cand.path, arch, pt.tp, **static)
        inc_fn: Callable[..., None] | None = None
        label = "reference"
        if inc_entry and pt.tp in inc_scope.tp and inc_scope.batch[0] <= pt.batch <= inc_scope.batch[1]:
            inc_fn = load_compiled(ctx.root / "kernels_generated" / ctx.op / inc_entry["candidate"], arch, pt.tp, **static)
            label = inc_label
        g = torch.Generator().manual_seed(pt.batch * 1009 + pt.tp)
        base = defn.make_inputs(pt, g, "cuda")
        per_set = sum(v.numel() * v.element_size() for v in base.values())
        n = rotation_copies(per_set, l2)
        sets = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(n - 1)]
        outs = [defn.alloc_outputs(pt, "cuda") for _ in range(n)]
        outs_inc = [defn.alloc_outputs(pt, "cuda") for _ in range(n)]
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
    extra = {"arch": arch, "bandwidth_bytes_per_s": bw, "l2_bytes": l2, "calls_per_graph": calls, "rounds": rounds,
             "incumbent": inc_label, "gpu": torch.cuda.get_device_name(0)}
    if layer_error:
        extra["layer_error"] = layer_error
    return points, layer, required, extra
