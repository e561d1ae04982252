"""Inside the sandboxed child, on a GPU: compile for this device, then check correctness
and time the candidate at each point. Imported only by _child.py (never by the parent).

Correctness per point (docs/fast_track_gates.md section 3): >= n_sets fresh random input
sets (seeds from os.urandom, never fixed); outputs pre-filled with NaN / -1; inputs compared
bitwise before and after (no mutation, STATE tensors excepted); a second run on the same
inputs must be bitwise identical; outputs checked by harness.compare against the fp32
reference. The first CUDA error ends the job: a process that saw one is never reused.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

CUDA_ERROR_MARKERS = ("CUDA error", "cudaError", "CUDA_ERROR", "illegal memory access", "illegal address",
                      "unspecified launch failure", "misaligned address", "device-side assert")


def _is_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(m.lower() in text.lower() for m in CUDA_ERROR_MARKERS) or type(exc).__name__ == "AcceleratorError"


def _fresh_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1


def _bits(t):
    """A tensor's bytes, for bitwise comparison (NaN == NaN, -0 != +0)."""
    import torch

    return t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t


def _same_bits(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _point(d: dict[str, Any]):
    from harness.opdef import Point, RoutingProfile

    return Point(batch=int(d["batch"]), tp=int(d.get("tp", 8)), context=int(d.get("context", 0)),
                 routing=RoutingProfile(d.get("routing", "uniform")), state_dtype=d.get("state_dtype", "fp32"),
                 shape=d.get("shape", ""))


def device_arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}a"


def check_point(defn, launch: Callable[..., None], compiled, pt, n_sets: int) -> dict[str, Any]:
    """Correctness at one point; returns {"verdict", "message", "n_sets", "worst": {...}}."""
    import torch

    from harness.compare import compare
    from harness.opdef import Role

    state = [t.name for t in defn.inputs if t.role is Role.STATE]
    worst: dict[str, dict[str, float]] = {}
    for s in range(n_sets):
        inputs = defn.make_inputs(pt, torch.Generator().manual_seed(_fresh_seed()), "cuda")
        snapshot = {k: v.clone() for k, v in inputs.items()}
        ref = defn.run_reference(snapshot)
        runs = []
        for _ in range(2):
            run_in = {k: (snapshot[k].clone() if k in state else inputs[k]) for k in inputs}
            outs = defn.alloc_outputs(pt, "cuda", poison=True)
            launch(compiled, **run_in, **outs)
            torch.cuda.synchronize()
            got = dict(outs)
            got.update({k: run_in[k] for k in state})
            runs.append(got)
            mutated = [k for k in inputs if k not in state and not _same_bits(inputs[k], snapshot[k])]
            if mutated:
                return {"verdict": "WRONG", "message": f"input set {s}: kernel mutated inputs {mutated}", "n_sets": s + 1}
        res = compare(defn, runs[0], ref, snapshot)
        for name, c in res.tensors.items():
            w = worst.setdefault(name, {"max_abs_err": 0.0, "rel_norm_err": 0.0})
            w["max_abs_err"] = max(w["max_abs_err"], c.max_abs_err)
            w["rel_norm_err"] = max(w["rel_norm_err"], c.rel_norm_err)
        if not res.ok:
            return {"verdict": "WRONG", "message": f"input set {s}: {res.summary()}"[:400], "n_sets": s + 1,
                    "worst": worst}
        diff = [k for k in runs[0] if not _same_bits(runs[0][k], runs[1][k])]
        if diff:
            return {"verdict": "WRONG", "message": f"input set {s}: second run differs bitwise in {diff} "
                    "(race or uninitialised memory)", "n_sets": s + 1, "worst": worst}
    return {"verdict": "OK", "message": f"{n_sets} input sets match", "n_sets": n_sets, "worst": worst}


def time_point(defn, launch, compiled, pt, vs_compiled_ref: bool, incumbent=None) -> dict[str, Any]:
    """CUDA-graph timing with inputs rotated past L2, in two interleaved groups (A B B A within
    each): the kernel beside the incumbent kernel (when given), then the eager reference beside
    its torch.compile. The references stay out of the kernels' group: session 36's A/A probe
    (one kernel.py loaded twice, skinny_gemm mla_qkv_a, scripts/gpu/aa_probe.py) read the two
    copies 0.977-0.980 apart with the eager reference between them in the interleave and 1.025
    with the order reversed, their spread 4-7% instead of 0.3-0.8%, and 0.999-1.000 with the
    kernels alone (results/h200/session36/aa_skinny.log)."""
    from .timing import time_interleaved

    sets, outs, per_set, l2 = rotated_inputs(defn, pt, _fresh_seed())
    n = len(sets)
    inc = None
    if incumbent is not None:
        inc_launch, inc_compiled = incumbent
        inc = lambda i: inc_launch(inc_compiled, **sets[i], **outs[i])  # noqa: E731
    ref_c = compiled_reference(defn) if vs_compiled_ref else None
    groups = timing_groups(lambda i: launch(compiled, **sets[i], **outs[i]), inc,
                           lambda i: defn.reference(**sets[i]), (lambda i: ref_c(sets[i], outs[i])) if ref_c else None)
    stats = {}
    for g in groups:
        stats.update(time_interleaved(g, n_sets=n))
    return {"rotation_copies": n, "rotation_bytes": n * per_set, "l2_bytes": l2,
            "groups": [list(g) for g in groups], "stats": {k: v.as_dict() for k, v in stats.items()}}


RECOMPILE_LIMIT = 1024      # dynamo's recompile limits while a compiled reference is in use (default 8)


def compiled_reference(defn, dynamic: bool | None = False, backend: str = "inductor") -> Callable[[dict, dict], None]:
    """torch.compile of the op's reference, called fn(inputs, outs) and writing into the given
    output buffers (a STATE output into its input, in place) as the kernels do; inductor fuses
    each copy into the kernel's store (one kernel, no temporary).

    Why not torch.compile(defn.reference): (1) under CUDA-graph capture a functional call's
    output comes from the graph's pool, and the block the previous call freed serves the next,
    so every call of a timing graph wrote one L2-resident buffer while the kernels write a
    rotated set: session 37's group probe read the functional form 3-6% faster than situ_and_mul's
    59ea06 at L2-sized points in a group of its own (results/h200/session37/). (2) With
    dynamic=False dynamo compiles one graph per shape and, past its recompile limit (8 per code
    object), silently runs the reference eagerly instead: the limits are raised here."""
    import torch
    import torch._dynamo.config as dynamo_config

    from harness.opdef import Role

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, RECOMPILE_LIMIT)
    state = frozenset(t.name for t in defn.outputs if t.role is Role.STATE)
    reference = defn.reference

    def into(inputs: dict, outs: dict) -> None:
        for name, value in reference(**inputs).items():
            (inputs[name] if name in state else outs[name]).copy_(value)

    return torch.compile(into, dynamic=dynamic, backend=backend)


def rotated_inputs(defn, pt, seed: int) -> tuple[list[dict], list[dict], int, int]:
    """(input sets, output sets, bytes of one input set, L2 bytes): enough copies of one random
    input set to rotate past L2 (timing.rotation_copies), each with its own outputs."""
    import torch

    from .timing import rotation_copies

    base = defn.make_inputs(pt, torch.Generator().manual_seed(seed), "cuda")
    per_set = sum(v.numel() * v.element_size() for v in base.values())
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 * 2**20))
    n = rotation_copies(per_set, l2)
    sets = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(n - 1)]
    return sets, [defn.alloc_outputs(pt, "cuda") for _ in range(n)], per_set, l2


Impl = Callable[[int], None]


def timing_groups(kernel: Impl, incumbent: Impl | None, reference: Impl, compiled_reference: Impl | None) -> list[dict[str, Impl]]:
    """time_point's interleaved groups: the kernels (the candidate, and the incumbent when there
    is one) in the first, the references (eager, and torch.compile when asked) in the second."""
    impls = {"kernel": kernel, "incumbent": incumbent, "reference": reference, "compiled_reference": compiled_reference}
    return split_references({n: f for n, f in impls.items() if f is not None}, ("reference", "compiled_reference"))


def split_references(impls: dict[str, Any], references: tuple[str, ...]) -> list[dict[str, Any]]:
    """`impls` as the interleaved groups to time them in: the kernels first, the named references
    in a second group, order kept, empty groups left out. The loop's worker (timing_groups) and
    scripts/gpu/bench_kernels.py both time this way (session 36's A/A probe: the eager reference
    inside the kernels' interleave biased two copies of one kernel 2-2.5% apart by order)."""
    kernels = {n: f for n, f in impls.items() if n not in references}
    refs = {n: f for n, f in impls.items() if n in references}
    return [g for g in (kernels, refs) if g]


def run_evaluate(job: dict[str, Any], compile_kernel) -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"verdict": "NOT_RUN", "message": "no CUDA GPU in the worker"}
    arch = device_arch()
    os.environ["CUTE_DSL_ARCH"] = arch           # before the candidate imports cutlass
    os.environ.setdefault("CUTE_DSL_KEEP", "")
    import reference_impls

    from .timing import measure_bandwidth

    defn = reference_impls.get(job["op"])
    out: dict[str, Any] = {"arch": arch, "gpu": torch.cuda.get_device_name(0), "points": [],
                           "torch": torch.__version__}
    compiled_by_key: dict[str, Any] = {}
    incumbent_by_key: dict[str, Any] = {}
    incumbents = job.get("incumbents", [])
    try:
        if job.get("time") and job.get("measure_bandwidth", True):
            out["bandwidth_bytes_per_s"] = measure_bandwidth()
        for pd in job["points"]:
            pt = _point(pd)
            key = repr((pt.tp, sorted(pd.get("static", {}).items())))
            if key not in compiled_by_key:
                cjob = {"kernel_path": job["kernel_path"], "tp": pt.tp, "options": job["options"],
                        "static": pd.get("static", {})}
                compiled, cp = compile_kernel(cjob)
                if cp["verdict"] != "OK":
                    cp["points"] = out["points"]
                    return {**out, **cp}
                compiled_by_key[key] = compiled
                out.setdefault("compile_s", cp.get("compile_s"))
            compiled = compiled_by_key[key]
            launch = sys.modules["candidate_kernel"].launch
            t0 = time.perf_counter()
            res = check_point(defn, launch, compiled, pt, int(job.get("n_sets", 10)))
            res.update({"batch": pt.batch, "tp": pt.tp, "label": pt.label(), "context": pt.context,
                        "state_dtype": pt.state_dtype, "shape": pt.shape, "check_s": time.perf_counter() - t0})
            out["points"].append(res)
            if res["verdict"] != "OK":
                continue
            if job.get("time"):
                incumbent = None
                idx = pick_incumbent(incumbents, pd.get("incumbents", []), arch)
                if idx is not None:
                    ikey = repr((idx, key))
                    if ikey not in incumbent_by_key:
                        try:
                            incumbent_by_key[ikey] = _load_incumbent(incumbents[idx]["path"], idx, job, pt,
                                                                     pd.get("static", {}))
                        except Exception as exc:  # noqa: BLE001 - the incumbent's failure is not the candidate's
                            incumbent_by_key[ikey] = None
                            out.setdefault("incumbent_errors", []).append(
                                f"{pt.label()}: {type(exc).__name__}: {str(exc).strip()[:200]}")
                    incumbent = incumbent_by_key[ikey]
                    if incumbent is not None:
                        res["incumbent_id"] = incumbents[idx]["id"]
                res["timing"] = time_point(defn, launch, compiled, pt, bool(job.get("vs_compiled_ref", True)), incumbent)
    except BaseException as exc:  # noqa: BLE001 - the candidate's fault becomes its verdict
        verdict = "CUDA_ERROR" if _is_cuda_error(exc) else "CRASH"
        out.update({"verdict": verdict, "message": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:400]})
        return out
    bad = [p for p in out["points"] if p["verdict"] != "OK"]
    out["verdict"] = "WRONG" if bad else "OK"
    out["message"] = bad[0]["message"] if bad else f"{len(out['points'])} points correct"
    return out


def runs_on(archs: Any, arch: str) -> bool:
    """Whether a kernel whose scope declares `archs` is called on a device of `arch`: the
    registry's dispatch rule (a scope without archs declares every arch)."""
    return not archs or arch in archs


def pick_incumbent(incumbents: list[dict[str, Any]], covering: list[int], arch: str) -> int | None:
    """Which incumbent runs a point: the first of `covering` (indices into the job's incumbents
    whose scope covers the point, in the order a call tries them) that declares this device's
    arch (runs_on; the registry would not call it elsewhere); None: the reference runs the point."""
    return next((i for i in covering if runs_on(incumbents[i].get("archs"), arch)), None)


def _load_incumbent(path: str, idx: int, job, pt, static: dict[str, str]):
    """Another candidate (A/B timing), loaded once under a module name of its own (incumbent_kernel_<idx>)
    and compiled for this point's TP and static key (a bf16-state point needs the incumbent's bf16 build)."""
    import importlib.util

    name = f"incumbent_kernel_{idx}"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)          # type: ignore[arg-type]
        sys.modules[name] = mod
        spec.loader.exec_module(mod)                          # type: ignore[union-attr]
    return mod.launch, mod.compile(pt.tp, job["options"], **static)


def run_canary(job: dict[str, Any]) -> dict[str, Any]:
    """A tiny known-good op whose answer is known in closed form: sum of 0..n-1 computed on
    the GPU, plus a matmul against its CPU result. Healthy GPU -> OK."""
    import torch

    if not torch.cuda.is_available():
        return {"verdict": "NOT_RUN", "message": "no CUDA GPU"}
    n = 1 << 20
    x = torch.arange(n, device="cuda", dtype=torch.float64)
    total = float(x.sum())
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    got = (a.cuda() @ a.cuda()).cpu()
    torch.cuda.synchronize()
    ok = total == n * (n - 1) / 2 and torch.allclose(got, a @ a, rtol=1e-4, atol=1e-4)
    return {"verdict": "OK" if ok else "WRONG", "message": "GPU healthy" if ok else "canary mismatch",
            "gpu": torch.cuda.get_device_name(0)}
