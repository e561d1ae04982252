"""Correctness + benchmark of the human-authored CuTe DSL candidates on a GPU (issue 7).

    source .device/cutedsl/setup.sh && PYTHONPATH=$PWD python3 scripts/gpu/bench_kernels.py \
        [--ops moe_router] [--batches 1,2,4,8,16,32,64] [--tps 8,16] [--no-compile-baseline]
        [--shapes latent_down,kda_in_proj,nb1,nb8 | all] [--state-dtypes fp32,bf16] [--candidates ID_PREFIX,...]

For every op with human candidates (kernels_generated/<op>/*/candidate.json, author "human"):
  1. correctness: each candidate against the reference at every (TP, B), outputs poisoned
     first, checked with harness.compare (the tolerance kinds of the op definition);
  2. timing (docs/fast_track_gates.md section 4, harness/toolchain/timing.py): reference eager,
     torch.compile of the reference and each candidate, CUDA-graph replay, inputs and weights
     rotated past 3 x L2, interleaved A B B A, median of repeats; the candidates (and the op's
     baseline) in one interleaved group, the references in a second (timing_groups);
     torch.compile writes into the candidates' rotated output buffers (gpu_eval.compiled_reference:
     functional, under graph capture every call wrote one reused L2-resident output; the JSON's
     "compile_into_outputs" says which form a run timed);
  3. the HBM floor = op.min_bytes / bandwidth of a device copy measured in the same run, and
     the launch floor: what the same timing charges an empty CuTe DSL kernel of 128 CTAs
     (scripts/gpu/launch_floor.py; ~1.1 us on the H200), so "floor+launch" is the least any
     one-kernel implementation can measure here;
  4. the copy yardstick ("copy"): an elementwise torch kernel on the SMs (torch.neg, fp32) that
     reads min_bytes / 2 bytes and writes as many (the floor's bytes), rotated like the candidates
     and timed right after them in a group of its own (inside their interleaved group it changed
     what they found in L2): what moving the op's bytes costs one launch of a plain
     streaming kernel under this timing, DRAM latency and ramp included. Not torch's copy_: under
     graph capture a same-dtype copy is a memcpy node, which scripts/gpu/copy_yardstick.py measured
     slower than the SM kernel (results/h200/session21/). Not a strict bound either (a read-mostly
     op reads where it also writes), but where even it misses a target, a one-pass kernel that
     streams no faster is unlikely to meet it (--no-copy-floor skips it).
skinny_gemm also times torch's own bf16 `x @ weight.t()` (cuBLAS), the bar its kernels must beat;
gemm_situ_and_mul times the pair it replaces, skinny_gemm then situ_and_mul as the registry of the
promoted kernels routes them ("unfused"; each row's "bar" names what ran).
A candidate is only checked and timed at the points of its declared scope (batch range, TP,
shapes, state dtypes). Points span TP x shape (ops with named shapes) x state dtype x B.
Prints one table per op (B; eager; torch.compile; ours; floor; % of floor) and writes
$OUT/bench_kernels_<op>[-<op>...].json (named by --ops, so two runs in one device command keep
both files, rewritten after every point). A failing candidate or point is recorded and the run
goes on; a hanging one (a kernel that never finishes) ends the run at --step-deadline-s with its
"[step]" line and a traceback on stderr (scripts/gpu/step_watchdog.py), the points before it kept.
Needs no pydantic / gitpython / LLM SDKs.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import reference_impls  # noqa: E402
from harness.compare import compare  # noqa: E402
from harness.hardware import gpu  # noqa: E402
from harness.opdef import Point, Role, SWEEP_BATCHES  # noqa: E402
from harness.scorecard import shape_names  # noqa: E402
from harness.toolchain import timing  # noqa: E402
from harness.toolchain.gpu_eval import compiled_reference, split_references  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_watchdog import StepWatchdog  # noqa: E402

L2_BYTES = gpu("h200").l2_bytes   # the lent GPU's L2 (the rotation and the tables' B* are sized by it)
CALLS_PER_GRAPH = 50               # calls a timing graph captures at least (timing.graph_calls: one per set)


def add_max_copies_arg(ap: argparse.ArgumentParser) -> None:
    """--max-copies, for every GPU script that rotates inputs with rotated_sets."""
    ap.add_argument("--max-copies", type=int, default=timing.MAX_COPIES,
                    help=f"most input sets rotated at a point (default {timing.MAX_COPIES}: small ops stay partly "
                         "in L2, the tables' B*; 4096 rotates add_rmsnorm, attn_res and kda past 3 x L2)")


def arch_of_device() -> str:
    major, minor = torch.cuda.get_device_capability()
    return {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}.get((major, minor), f"sm_{major}{minor}a")


def human_candidates(op: str, only: tuple[str, ...] = ()) -> list[dict]:
    base = ROOT / "kernels_generated" / op
    out = []
    for meta in sorted(base.glob("*/candidate.json")) if base.is_dir() else []:
        d = json.loads(meta.read_text())
        if only and not any(d["id"].startswith(p) for p in only):
            continue
        if d.get("provenance", {}).get("author") == "human":
            tpl = d["provenance"].get("template") or {}
            d["label"] = f"{tpl.get('family', 'hand')}:{d['id'][:6]}"
            d["path"] = str(meta.parent)
            out.append(d)
    return out


def static_verdict(op: str, folder: str) -> str:
    """The static gate's code policy on a candidate ("ok" or the first finding): benchmarks load
    kernel modules directly, so a candidate the static gate would refuse is flagged here."""
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.static_check import check_candidate

    rep = check_candidate(load_candidate(op, Path(folder)))
    return "ok" if rep.ok else "REJECT: " + "; ".join(str(f) for f in rep.findings[:2])


def load_kernel(path: str):
    spec = importlib.util.spec_from_file_location(f"cand_{Path(path).name}", Path(path) / "kernel.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no kernel.py to load in {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def point_label(defn, point: Point) -> str:
    return point.label() + (f" state={point.state_dtype}" if len(defn.state_dtypes) > 1 else "")


def in_scope(cand: dict, point: Point) -> bool:
    """Whether `point` lies inside the candidate's declared scope (candidate.json "scope")."""
    sc = cand.get("scope", {})
    lo, hi = sc.get("batch", [1, 1 << 30])
    return (lo <= point.batch <= hi and point.tp in sc.get("tp", [point.tp])
            and (not sc.get("shapes") or (point.shape or "") in sc["shapes"])
            and (not sc.get("state_dtypes") or not point.state_dtype or point.state_dtype in sc["state_dtypes"]))


# torch's own fast path for an op, timed next to the reference (the bar some kernels must beat)
BASELINES = {"skinny_gemm": ("cublas", lambda x, weight, shape: x @ weight.t())}   # every bar takes the point's shape


UNFUSED = "unfused"     # gemm_situ_and_mul's bar column (runs before session 52: "cublas+situ")


def unfused_gate_up_act(tp: int, reg=None):
    """gemm_situ_and_mul's bar: what the decoder runs where the fused kernel does not
    (harness/model/decoder.py, `_gate_up_act`): skinny_gemm, then situ_and_mul, each through the
    registry of the promoted kernels (`reg`, default `harness.registry.default()`). So the GEMM is
    skinny_gemm's promoted kernel where one covers the call (at dense_gate_up TP16: a87a4d from
    session 52, its replacement 2f5f13 since session 66), and elsewhere cuBLAS's bf16 x @ w^T,
    skinny_gemm's bar (not its fp32 reference, which the registry would fall back to); the SiTU is the promoted situ_and_mul at the width it is
    scoped to (the shared experts') and torch's reference at dense_gate_up's. Runs before session 52
    timed cuBLAS for the GEMM everywhere, labelled "cublas+situ". Returns (label, fn(x, weight,
    shape)); `fn.ran(x, weight, shape)` runs it once and names what each op ran
    ("skinny_gemm:<candidate>" or "skinny_gemm:cublas", "situ_and_mul:<candidate>" or ":reference",
    "<op>:failed (<error>)" where a kernel raised and the registry ran the op's reference instead)."""
    from harness import registry as registry_mod

    reg = reg or registry_mod.default()

    def run(x, weight, shape):
        gemm_in = {"x": x, "weight": weight}
        if reg.selects_kernel("skinny_gemm", gemm_in, tp=tp, shape=shape):
            gate_up = reg.run("skinny_gemm", gemm_in, tp=tp, shape=shape)["out"]
        else:
            gate_up = x @ weight.t()
        return reg.run("situ_and_mul", {"gate_up": gate_up}, tp=tp)["out"]

    def ran(x, weight, shape) -> dict[str, str]:
        reg.reset_counters()
        run(x, weight, shape)
        by_op, errors = {op: cand for op, cand in reg.candidate_counters()}, reg.errors()
        return {op: f"{op}:{by_op[op]}" if op in by_op else f"{op}:failed ({errors[op]})" if op in errors
                else f"{op}:{otherwise}" for op, otherwise in (("skinny_gemm", "cublas"), ("situ_and_mul", "reference"))}
    run.ran = ran  # type: ignore[attr-defined]  # an attribute on a function
    return UNFUSED, run


# baselines that depend on TP (built once per TP)
TP_BASELINES = {"gemm_situ_and_mul": unfused_gate_up_act}


def static_for(defn, point: Point) -> dict:
    s = {}
    if len(defn.state_dtypes) > 1:
        s["state_dtype"] = point.state_dtype
    if point.shape:
        s["shape"] = point.shape
    return s


def kernel_tensors(defn, inputs: dict, outs: dict) -> dict:
    t = dict(inputs)
    t.update({k: v for k, v in outs.items() if defn.spec(k).role is not Role.STATE})
    return t


def err_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300] + " | " + traceback.format_exc()[-600:].replace("\n", " / ")


def surface_launch_error() -> None:
    """Raise, right after a kernel's launch, a launch error its launcher printed without raising.
    Session 42: a CuTe DSL kernel asking more shared memory than an SM has printed "Error: kernel
    ... " and returned; torch then raised "CUDA error: invalid argument" at its next kernel launch,
    an input clone of the next point, which ended the whole diag_probe run. One small torch kernel
    here makes that error this kernel's, inside its caller's try (launch_checked)."""
    torch.empty(1, device="cuda").fill_(0.0)
    torch.cuda.synchronize()


def launch_checked(mod, compiled, tensors: dict) -> None:
    """One launch of a kernel module whose errors stay its own. One that only printed its error
    raises it here (surface_launch_error). One that raised may have left the CUDA error set: session
    43 (the GPU test test_a_variant_whose_launch_fails_is_recorded_and_the_run_goes_on) saw CuTe DSL
    raise a ValueError of its own and leave cudaErrorInvalidValue behind, which torch then raised at
    the next variant's first kernel, recording that variant as failed in its place. The probe kernel
    consumes it (torch checks each launch with cudaGetLastError); what the probe raises is dropped
    and the launch's own exception goes on."""
    try:
        mod.launch(compiled, **tensors)
    except Exception:
        with contextlib.suppress(Exception):
            surface_launch_error()
        raise
    surface_launch_error()


def check_point(defn, mod, compiled, point: Point, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed + point.batch)
    inputs = defn.make_inputs(point, gen, "cuda")
    ref = defn.run_reference(inputs)
    outs = defn.alloc_outputs(point, "cuda", poison=True)
    kin = {k: (v.clone() if defn.spec(k).role is Role.STATE else v) for k, v in inputs.items()}
    launch_checked(mod, compiled, kernel_tensors(defn, kin, outs))
    got = dict(outs)
    for k, v in kin.items():
        if defn.spec(k).role is Role.STATE:
            got[k] = v
    res = compare(defn, got, ref, inputs)
    return {"ok": res.ok, "summary": res.summary(),
            "tensors": {n: {"ok": c.ok, "max_abs_err": c.max_abs_err, "rel_norm_err": c.rel_norm_err,
                            "reason": c.reason} for n, c in res.tensors.items()}}


COPY = "copy"                              # the copy yardstick's column in a row's times
REFERENCES = ("eager", "compile")          # timed in a group of their own: see timing_groups


def timing_groups(impls: dict) -> list[dict]:
    """The interleaved groups a point is timed in (gpu_eval.split_references): the kernels
    (candidates, and the op's torch / cuBLAS baseline) first, then the references (eager,
    torch.compile), each group A B B A. Since session 36: with the eager reference inside the
    kernels' interleave, one skinny_gemm kernel.py loaded twice read 0.977-1.025 against itself
    depending on the order, each copy 2.5-5% slower with a 4-7% spread, and 0.999-1.000 (spread
    0.3-0.8%) without it (scripts/gpu/aa_probe.py, results/h200/session36/aa_skinny.log). Runs
    before session 36 timed all in one group."""
    return split_references(impls, REFERENCES)


def eager_on_fewer_sets(n_sets: int, eager_sets: int) -> bool:
    """Whether --eager-copies (eager_sets; 0: as many as the kernels) gives eager fewer of a
    point's n_sets rotated sets, in a group of its own (timing_plan)."""
    return 0 < eager_sets < n_sets


def timing_plan(impls: dict, n_sets: int, eager_sets: int = 0) -> list[tuple[dict, int]]:
    """(group, rotated sets) pairs to time a point in: timing_groups' groups over all n_sets, except
    that with 0 < eager_sets < n_sets the eager reference leaves its group for one of its own over
    the first eager_sets sets (--eager-copies). A graph captures one call per rotated set, and at
    4096 sets the eager reference's tens of kernels a call made capture and replay the run's
    longest part, so cold runs skipped it (--no-eager) and their tables borrowed eager from an
    older warm run ("other run" in `harness scorecard`). Fewer sets keep it in the same run; its
    inputs may then stay partly in L2 (the row's eager_rotation_bytes; the tables mark it)."""
    groups = timing_groups(impls)
    if not (eager_on_fewer_sets(n_sets, eager_sets) and "eager" in impls):
        return [(g, n_sets) for g in groups]
    rest = [{n: f for n, f in g.items() if n != "eager"} for g in groups]
    return [(g, n_sets) for g in rest if g] + [({"eager": impls["eager"]}, eager_sets)]


def copy_elems(min_bytes: int) -> int:
    """fp32 elements per copy so that one copy reads and writes min_bytes in all (at least one)."""
    return max(1, min_bytes // 8)


def copy_buffers(min_bytes: int, n_sets: int) -> tuple[list, list]:
    """n_sets (source, destination) pairs of copy_elems(min_bytes) fp32 elements, rotated like
    the op's inputs."""
    n = copy_elems(min_bytes)
    src = [torch.ones(n, dtype=torch.float32, device="cuda") for _ in range(n_sets)]
    return src, [torch.empty_like(t) for t in src]


def copy_impl(min_bytes: int, n_sets: int):
    """The copy yardstick for one point: fn(set_index) streams that set's source into its
    destination by an SM kernel (torch.neg: torch's vectorized elementwise loop; a plain copy_
    would be a memcpy node in the graph)."""
    src, dst = copy_buffers(min_bytes, n_sets)
    return lambda i: torch.neg(src[i], out=dst[i])


def copy_yardstick_time(min_bytes: int, n_sets: int, rounds: int) -> dict:
    """The copy yardstick's stats at one point, timed in a group of its own after the candidates'
    interleaved group: in that group it would change what the next implementation finds in L2
    (the bytes it moves evict theirs), and at the points whose rotation stays partly in L2 (B*) it
    did: kda TP8 B=1 bf16 3.11 us against 2.81 without it, same kernel, same session
    (results/h200/session21/)."""
    try:
        return timing.time_interleaved({COPY: copy_impl(min_bytes, n_sets)}, n_sets, CALLS_PER_GRAPH, rounds)[COPY].as_dict()
    except Exception as exc:  # noqa: BLE001 - a yardstick failure must not cost the point
        return {"error": err_text(exc)}


def rotation_count(min_bytes: int, max_copies: int = timing.MAX_COPIES) -> int:
    """Input sets to rotate at a point: enough for 3 x L2 (timing.rotation_copies), at most
    max_copies. The default cap (64) leaves the small ops' points partly in L2 (the tables' B*);
    --max-copies 4096 rotates every point of add_rmsnorm (B=1: 2,634 sets), attn_res (1,881) and
    kda_decode (418) past it, not situ_and_mul's (2-150 KB a point: up to 81,920 sets)."""
    return timing.rotation_copies(min_bytes, L2_BYTES, max_copies=max_copies)


def rotated_sets(defn, point: Point, max_copies: int = timing.MAX_COPIES) -> tuple[list[dict], list[dict]]:
    gen = torch.Generator().manual_seed(1234)
    base = defn.make_inputs(point, gen, "cuda")
    n = rotation_count(defn.min_bytes(point), max_copies)
    sets = [base] + [{k: v.clone() for k, v in base.items()} for _ in range(n - 1)]
    outs = [defn.alloc_outputs(point, "cuda") for _ in range(n)]
    return sets, outs


def known_shapes() -> set[str]:
    """Every op's named shapes (skinny_gemm's GEMMs, attn_res's nb1..nb8, ...)."""
    return {s for d in reference_impls.all_ops() for s in shape_names(d)}


def op_points(defn, batches: list[int], tps: list[int], shapes: list[str], state_dtypes: list[str],
              skip: tuple[str, ...] = ()) -> list[Point]:
    """TP x shape x state dtype x B; shapes only for ops with named shapes, state dtypes only where
    the op has more than one. --shapes may mix several ops' names (latent_down,nb1): each op takes
    its own, or its default shape when none is its own; a name no op knows is an error. skip:
    "shape@tp" entries (--skip-points) whose points are left out (a cover bench leaves the points a
    promoted kernel already runs)."""
    names = shape_names(defn)
    every = known_shapes()
    unknown = [s for s in shapes if s not in every and s != "all"]
    if unknown:
        raise SystemExit(f"{defn.name}: unknown shape(s) {unknown} (known: {', '.join(names or sorted(every))})")
    if names:
        mine = [s for s in shapes if s in names]
        shp = names if shapes == ["all"] else mine or [defn.extra.get("default_shape", names[0])]
    else:
        shp = [""]
    # ops with one state dtype keep Point's default; a wanted dtype the op lacks is skipped
    sts = [s for s in state_dtypes if s in defn.state_dtypes] if len(defn.state_dtypes) > 1 else []
    return [with_state_dtype(Point(batch=b, tp=tp, shape=sh), st)
            for tp in tps for sh in shp if f"{sh}@{tp}" not in skip for st in (sts or [""]) for b in batches]


def parse_skip_points(text: str) -> tuple[str, ...]:
    """--skip-points "kda_o_proj@16,mla_q_b@16" -> its entries, each a known shape name @ a TP."""
    every = known_shapes()
    out = tuple(e for e in text.split(",") if e)
    for e in out:
        shape, _, tp = e.partition("@")
        if shape not in every or not tp.isdigit():
            raise SystemExit(f"bench_kernels: --skip-points takes shape@tp entries of known shapes, not {e!r}")
    return out


def with_state_dtype(point: Point, state_dtype: str) -> Point:
    """`point` with its state dtype set, or as it is (Point's default) when `state_dtype` is ""."""
    return dataclasses.replace(point, state_dtype=state_dtype) if state_dtype else point


def timing_key(defn, point: Point, impls: dict) -> str:
    """When two points may share one timing: equal tensor shapes (the router is the same at TP8 and
    TP16, and skinny_gemm's kda_o_proj at TP16 is shared_down at TP8) and the same columns to time.
    A candidate in scope at one and not the other must be timed where it runs: session 52 copied
    91b17e's shared_down TP8 time into kda_o_proj TP16, where a87a4d runs and 91b17e does not."""
    return json.dumps([defn.shapes(point), point.state_dtype, sorted(impls)], sort_keys=True)


def bench_op(op: str, points: list[Point], arch: str, bw: float, use_compile: bool,
             rounds: int, only: tuple[str, ...] = (), dog: StepWatchdog | None = None,
             on_row=lambda rec: None, copy_floor: bool = True, max_copies: int = timing.MAX_COPIES,
             use_eager: bool = True, eager_copies: int = 0) -> dict:
    """One op's table; `dog` (if given) times every compile + check and every point's timing (the
    caller disarms it), `on_row(rec)` runs after each point (the caller writes its JSON there);
    `copy_floor` adds the copy yardstick (COPY) to every point's timing; `max_copies` caps the
    rotated input sets (rotation_count); `use_eager` times the eager reference (a graph captures
    at least one call per set, so at 4096 sets its tens of kernels a call make capture and replay
    the run's longest part: a cold run skips it, or rotates eager_copies sets for it: timing_plan)."""
    step = dog.step if dog is not None else (lambda what: None)
    defn = reference_impls.get(op)
    cands = human_candidates(op, only)
    by_label = {c["label"]: c for c in cands}
    rec: dict = {"op": op, "candidates": {}, "rows": []}
    loaded: dict[str, tuple] = {}
    for c in cands:
        info = {"id": c["id"], "template": c["provenance"].get("template"), "compile": {}, "check": {},
                "static": static_verdict(op, c["path"])}
        rec["candidates"][c["label"]] = info
        try:
            mod = load_kernel(c["path"])
            loaded[c["label"]] = (mod, {})
        except Exception as exc:  # noqa: BLE001 - one bad candidate must not stop the others
            info["error"] = err_text(exc)
    compiled_ref = compiled_reference(defn, dynamic=None) if use_compile else None    # shapes: dynamo's automatic dynamic
    timed_by_shape: dict[str, dict] = {}
    baseline = BASELINES.get(op)
    tp_baselines: dict[int, tuple] = {}
    for point in points:
        tp, b = point.tp, point.batch
        if op in TP_BASELINES:
            if tp not in tp_baselines:
                tp_baselines[tp] = TP_BASELINES[op](tp)
            baseline = tp_baselines[tp]
        if baseline is not None:
            rec["baseline"] = baseline[0]
        row: dict = {"tp": tp, "batch": b, "shape": point.shape,
                     "state_dtype": point.state_dtype if len(defn.state_dtypes) > 1 else "",
                     "min_bytes": defn.min_bytes(point)}
        row["floor_us"] = row["min_bytes"] / bw * 1e6
        impls: dict = {}
        sets, outs = rotated_sets(defn, point, max_copies)
        row["rotation_bytes"] = len(sets) * row["min_bytes"]
        if use_eager:
            impls["eager"] = lambda i, s=sets: defn.reference(**s[i])
            if eager_on_fewer_sets(len(sets), eager_copies):
                row["eager_rotation_bytes"] = eager_copies * row["min_bytes"]
        if compiled_ref is not None:
            impls["compile"] = lambda i, s=sets, o=outs: compiled_ref(s[i], o[i])
        if copy_floor:
            row["copy_bytes"] = 8 * copy_elems(row["min_bytes"])
        if baseline is not None:
            impls[baseline[0]] = lambda i, s=sets, f=baseline[1], sh=point.shape: f(**s[i], shape=sh)
            if hasattr(baseline[1], "ran"):                          # a bar that routes: name what ran
                row["bar"] = baseline[1].ran(**sets[0], shape=point.shape)
        for label, (mod, cache) in loaded.items():
            info = rec["candidates"][label]
            if not in_scope(by_label[label], point):
                continue
            st = static_for(defn, point)
            key = json.dumps([tp, st], sort_keys=True)
            step(f"{op} {label} {point_label(defn, point)}: compile + check")
            try:
                if key not in cache:
                    t0 = time.perf_counter()
                    cache[key] = mod.compile(tp, "--enable-tvm-ffi", **st)
                    info["compile"][key] = round(time.perf_counter() - t0, 2)
                chk = check_point(defn, mod, cache[key], point)
            except Exception as exc:  # noqa: BLE001
                chk = {"ok": False, "summary": err_text(exc)}
            info["check"][point_label(defn, point)] = chk
            if chk["ok"]:
                impls[label] = (lambda i, m=mod, cp=cache[key], s=sets, o=outs:
                                m.launch(cp, **kernel_tensors(defn, s[i], o[i])))
        shape_key = timing_key(defn, point, impls)
        if shape_key in timed_by_shape:                 # e.g. the router is the same at TP8/TP16
            row["times"] = timed_by_shape[shape_key]
        else:
            step(f"{op} {point_label(defn, point)}: timing {', '.join(impls)}")
            times: dict = {}
            for name, fn in impls.items():          # warm each alone (torch.compile traces here)
                try:
                    fn(0)
                    torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001
                    times[name] = {"error": err_text(exc)}
            good = {n: f for n, f in impls.items() if n not in times}
            for group, n_sets in timing_plan(good, len(sets), eager_copies):
                try:
                    stats = timing.time_interleaved(group, n_sets, calls_per_graph=CALLS_PER_GRAPH, rounds=rounds)
                    times.update({n: s.as_dict() for n, s in stats.items()})
                except Exception as exc:  # noqa: BLE001 - fall back to one graph per impl
                    for n, f in group.items():
                        try:
                            times[n] = timing.time_interleaved({n: f}, n_sets, CALLS_PER_GRAPH, rounds)[n].as_dict()
                        except Exception as exc2:  # noqa: BLE001
                            times[n] = {"error": err_text(exc2)}
                    times["_interleave_error"] = err_text(exc)
            if copy_floor:                          # its own group: see copy_yardstick_time
                times[COPY] = copy_yardstick_time(row["min_bytes"], len(sets), rounds)
            timed_by_shape[shape_key] = times
            row["times"] = times
        rec["rows"].append(row)
        on_row(rec)
        del sets, outs
        torch.cuda.empty_cache()
    return rec


def med(times: dict, name: str) -> float | None:
    t = times.get(name)
    return t.get("median_us") if isinstance(t, dict) else None


def print_table(rec: dict, launch_us: float | None = None) -> None:
    """One line per point: B, eager, torch.compile, each candidate, the HBM floor, the best
    candidate's % of it and its speedup over torch.compile; with the launch floor (us) also
    floor + launch and the best candidate's time over that; with the copy yardstick (rows timed
    with COPY) also its time and the best candidate's time over it."""
    labels = list(rec["candidates"])
    base = rec.get("baseline") or BASELINES.get(rec["op"], (None,))[0]
    copied = any(med(r.get("times", {}), COPY) is not None for r in rec["rows"])
    print(f"\n== {rec['op']} ==  (us, CUDA-graph replay, median; floor = min_bytes / measured copy bandwidth"
          + (f"; launch = {launch_us:.2f} us, an empty 128-CTA kernel" if launch_us else "")
          + ("; copy = an elementwise SM kernel moving the same bytes, same timing" if copied else "") + ")")
    extra = [h for h, key in (("shape", "shape"), ("state", "state_dtype")) if any(r.get(key) for r in rec["rows"])]
    hdr = (["TP"] + extra + ["B", "eager", "compile"] + ([base] if base else []) + labels
           + ["floor", "best %floor"] + (["floor+launch", "best/(fl+ln)"] if launch_us else [])
           + (["copy", "best/copy"] if copied else [])
           + ["best vs compile"] + ([f"best vs {base}"] if base else []))
    print(" | ".join(f"{h:>14}" for h in hdr))
    in_l2 = False
    for row in rec["rows"]:
        t = row["times"]
        ours = [med(t, lb) for lb in labels]
        copy = med(t, COPY)
        ok = [o for o in ours if o is not None]
        best = min(ok) if ok else None
        comp = med(t, "compile")
        bl = med(t, base) if base else None
        partly_l2 = timing.partly_in_l2(row.get("rotation_bytes", math.inf), L2_BYTES)
        in_l2 = in_l2 or partly_l2
        cells = ([row["tp"]] + [row.get("shape" if h == "shape" else "state_dtype") for h in extra]
                 + [f"{row['batch']}*" if partly_l2 else row["batch"], med(t, "eager"), comp] + ([bl] if base else []) + ours
                 + [row["floor_us"], (100 * row["floor_us"] / best) if best else None]
                 + ([row["floor_us"] + launch_us, (best / (row["floor_us"] + launch_us)) if best else None]
                    if launch_us else [])
                 + ([copy, (best / copy) if best and copy else None] if copied else [])
                 + [(comp / best) if best and comp else None] + ([(bl / best) if best and bl else None] if base else []))
        print(" | ".join(f"{c:>14.2f}" if isinstance(c, float) else f"{str(c if c is not None else '-'):>14}"
                         for c in cells))
    eager_l2 = [r["batch"] for r in rec["rows"] if timing.partly_in_l2(r.get("eager_rotation_bytes", math.inf), L2_BYTES)]
    if any("eager_rotation_bytes" in r for r in rec["rows"]):
        print(f"  eager: fewer rotated sets than the kernels (--eager-copies); partly in L2 at B = "
              f"{', '.join(map(str, sorted(set(eager_l2)))) or 'none'}")
    if in_l2:
        print(f"  B*: the rotated inputs (--max-copies at most) span less than "
              f"{timing.L2_ROTATION_FACTOR:g} x L2, so part of each call is served from L2 (as decode's activations are)")
    for lb, info in rec["candidates"].items():
        bad = {p: c["summary"] for p, c in info["check"].items() if not c["ok"]}
        status = "all points correct" if info["check"] and not bad else f"{len(bad)} failing points"
        static = info.get("static", "ok")
        print(f"  {lb} ({info['id']}): {status}" + (f"; error {info['error']}" if "error" in info else "")
              + ("" if static == "ok" else f"; static gate {static}"))
        for p, s in list(bad.items())[:4]:
            print(f"     {p}: {s[:200]}")


def main() -> None:
    ap = argparse.ArgumentParser(description="issue 7 kernels: correctness + timing on the GPU")
    ap.add_argument("--ops", default="moe_router,add_rmsnorm,attn_res,situ_and_mul,kda_decode,skinny_gemm")
    ap.add_argument("--batches", default=",".join(map(str, SWEEP_BATCHES)))
    ap.add_argument("--tps", default="8,16")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--no-compile-baseline", action="store_true")
    ap.add_argument("--shapes", default="", help="named shapes of ops that have them (comma list or 'all'): "
                                                 "skinny_gemm's GEMMs, attn_res's nb1..nb8; default: each op's "
                                                 "default shape (latent_down, nb8)")
    ap.add_argument("--state-dtypes", default="fp32,bf16", help="state dtypes of ops with several")
    ap.add_argument("--skip-points", default="", help="comma list of shape@tp whose points are not benched")
    ap.add_argument("--candidates", default="", help="only candidates whose id starts with one of these")
    ap.add_argument("--no-launch-floor", action="store_true", help="skip timing the empty-kernel launch floor")
    ap.add_argument("--no-copy-floor", action="store_true",
                    help="skip the copy yardstick (an SM kernel moving each point's bytes, timed after the candidates)")
    add_max_copies_arg(ap)
    ap.add_argument("--no-eager", action="store_true",
                    help="skip timing the eager reference (with --max-copies 4096 it dominates the run)")
    ap.add_argument("--eager-copies", type=int, default=0,
                    help="rotate at most this many input sets for the eager reference, timed in a group of its "
                         "own (default 0: as many as the kernels); keeps eager in a cold run at a small cost")
    ap.add_argument("--step-deadline-s", type=float, default=300.0,
                    help="end the run when one compile + check or one point's timing takes longer (a hung kernel)")
    args = ap.parse_args()
    if args.eager_copies < 0:
        ap.error(f"--eager-copies must be 0 (as many as the kernels) or more, not {args.eager_copies}")
    only = tuple(c for c in args.candidates.split(",") if c)
    skip = parse_skip_points(args.skip_points)
    arch = arch_of_device()
    os.environ.setdefault("CUTE_DSL_ARCH", arch)
    import torch._dynamo
    torch._dynamo.config.cache_size_limit = 64
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"bench_kernels_{'-'.join(o for o in args.ops.split(',') if o)}.json"
    bw = timing.measure_bandwidth()
    result = {"device": torch.cuda.get_device_name(), "arch": arch, "torch": torch.__version__,
              "bandwidth_bytes_per_s": bw, "max_copies": args.max_copies, "eager": not args.no_eager,
              "eager_copies": args.eager_copies,
              "compile_into_outputs": True, "ops": {}}
    print(f"device {result['device']} ({arch}), copy bandwidth {bw / 1e12:.2f} TB/s")
    launch_us = None
    if not args.no_launch_floor:
        import launch_floor

        shape = next(s for s in launch_floor.SHAPES if s.name == "128 CTAs x 448")
        launch_us = launch_floor.time_shapes([shape], args.rounds)[shape.name].median_us
        result["launch_floor_us"] = launch_us
        print(f"launch floor (an empty 128-CTA CuTe DSL kernel, same timing): {launch_us:.2f} us")
    dog = StepWatchdog(args.step_deadline_s)
    for op in [o for o in args.ops.split(",") if o]:
        if not human_candidates(op, only):
            print(f"\n== {op} ==  no human candidates: skipped")
            continue
        t0 = time.perf_counter()
        try:
            defn = reference_impls.get(op)
            points = op_points(defn, [int(b) for b in args.batches.split(",")], [int(t) for t in args.tps.split(",")],
                               [s for s in args.shapes.split(",") if s], [s for s in args.state_dtypes.split(",") if s],
                               skip)
            def partial(r: dict, op: str = op) -> None:      # the points so far survive a hang
                result["ops"][op] = r
                out_file.write_text(json.dumps(result, indent=1, default=str))

            rec = bench_op(op, points, arch, bw, not args.no_compile_baseline, args.rounds, only,
                           dog=dog, on_row=partial, copy_floor=not args.no_copy_floor,
                           max_copies=args.max_copies, use_eager=not args.no_eager,
                           eager_copies=args.eager_copies)
        except Exception as exc:  # noqa: BLE001
            rec = {"op": op, "error": err_text(exc), "candidates": {}, "rows": []}
            print(f"\n== {op} ==  FAILED: {rec['error']}")
        dog.done()                                       # no step runs now, whether the op finished or failed
        rec["wall_s"] = round(time.perf_counter() - t0, 1)
        result["ops"][op] = rec
        if rec.get("rows"):
            print_table(rec, launch_us)
        out_file.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nwrote {out_file}")


if __name__ == "__main__":
    main()
