"""Per-kernel device time of the human candidates (and torch.compile) under CUDA-graph replay.

    source scripts/gpu/setup.sh && python3 scripts/gpu/profile_kernels.py [--ops moe_router] [--batches 1,8,64] [--candidates ffcc5b,...]

For each candidate and batch: one CUDA graph of CALLS calls (inputs and weights rotated past
3 x L2, as in bench_kernels.py), replayed under torch.profiler; prints and writes
$OUT/profile_kernels.json with, per kernel name, the mean device time per call and the number
of launches per call (the split between e.g. the router GEMM and its top-k kernel), and from
the device timeline each kernel's mean tail (how far its end moves the stream past the kernels
before it) and gap (start after the previous end; negative: launched early by PDL).
A kernel launched with PDL starts early and waits in griddepcontrol.wait: its device time here
includes that wait (and, calls back to back, the overlap with the call before), so read it as
an upper bound; bench_kernels.py's separated timing is the per-call figure.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import reference_impls  # noqa: E402
from harness.opdef import Point  # noqa: E402
from harness.toolchain import timing  # noqa: E402
from harness.toolchain.gpu_eval import compiled_reference  # noqa: E402

import bench_kernels as bk  # noqa: E402

CALLS = 20
REPLAYS = 5


def kernel_times(fn, n_sets: int) -> dict[str, dict[str, float]]:
    from torch.profiler import ProfilerActivity, profile

    calls = timing.graph_calls(CALLS, n_sets)          # every rotated set at least once
    g = timing.capture_graph(fn, n_sets, calls)
    g.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            g.replay()
        torch.cuda.synchronize()
    per: dict[str, list[float]] = defaultdict(list)
    spans: list[tuple[float, float, str]] = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.name and "Memcpy" not in ev.name:
            per[ev.name].append(ev.device_time if hasattr(ev, "device_time") else ev.cuda_time)
            spans.append((ev.time_range.start, ev.time_range.end, ev.name))
    n_calls = calls * REPLAYS
    tails = timeline_tails(spans)
    return {name[:90]: {"us_per_call": sum(v) / n_calls, "launches_per_call": len(v) / n_calls,
                        "mean_us": sum(v) / len(v), **tails.get(name, {})} for name, v in per.items()}


def timeline_tails(spans: list[tuple[float, float, str]]) -> dict[str, dict[str, float]]:
    """Per kernel name, from (start_us, end_us, name) device intervals: the mean time its end
    adds past every earlier kernel's end ("tail_us": what it costs the stream; a PDL kernel
    that started early and waited is charged only for what it does after its predecessor) and
    the mean gap from the previous kernel's end to its start ("gap_us", negative when it was
    launched early). The first kernel of the timeline is skipped (nothing before it)."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"tail": [], "gap": []})
    spans = sorted(spans)
    horizon = spans[0][1] if spans else 0.0
    prev_end = horizon
    for start, end, name in spans[1:]:
        out[name]["tail"].append(max(0.0, end - horizon))
        out[name]["gap"].append(start - prev_end)
        horizon = max(horizon, end)
        prev_end = end
    return {n: {"tail_us": sum(d["tail"]) / len(d["tail"]), "gap_us": sum(d["gap"]) / len(d["gap"])}
            for n, d in out.items() if d["tail"]}


def main() -> None:
    ap = argparse.ArgumentParser(description="per-kernel device times under CUDA graphs")
    ap.add_argument("--ops", default="moe_router")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--no-compile-baseline", action="store_true")
    ap.add_argument("--candidates", default="", help="only candidates whose id starts with one of these")
    bk.add_max_copies_arg(ap)
    args = ap.parse_args()
    only = tuple(c for c in args.candidates.split(",") if c)
    os.environ.setdefault("CUTE_DSL_ARCH", bk.arch_of_device())
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name(), "calls_min": CALLS, "replays": REPLAYS, "ops": {}}
    for op in args.ops.split(","):
        defn = reference_impls.get(op)
        rec: dict = {}
        result["ops"][op] = rec
        compiled_ref = None if args.no_compile_baseline else compiled_reference(defn, dynamic=None)   # as bench_kernels.py
        mods: dict[str, tuple[Any, dict]] = {}        # label -> (kernel module, its compile cache)
        for c in bk.human_candidates(op, only):
            try:
                mods[c["label"]] = (bk.load_kernel(c["path"]), {})
            except Exception as exc:  # noqa: BLE001
                rec[c["label"]] = {"error": bk.err_text(exc)}
        for b in [int(x) for x in args.batches.split(",")]:
            point = Point(batch=b, tp=8)
            sets, outs = bk.rotated_sets(defn, point, args.max_copies)
            impls: dict[str, Callable[..., None]] = {}   # name -> fn(set index)
            if compiled_ref is not None:
                impls["compile"] = lambda i, s=sets, o=outs: compiled_ref(s[i], o[i])
            for label, (mod, cache) in mods.items():
                try:
                    if "k" not in cache:
                        cache["k"] = mod.compile(8, "--enable-tvm-ffi", **bk.static_for(defn, point))
                    impls[label] = (lambda i, m=mod, cp=cache["k"], s=sets, o=outs:
                                    m.launch(cp, **bk.kernel_tensors(defn, s[i], o[i])))
                except Exception as exc:  # noqa: BLE001
                    rec.setdefault(label, {})[f"B{b}"] = {"error": bk.err_text(exc)}
            for name, fn in impls.items():
                kt: dict[str, Any]                         # kernel name -> times, or {"error": text}
                try:
                    fn(0)
                    torch.cuda.synchronize()
                    kt = kernel_times(fn, len(sets))
                except Exception as exc:  # noqa: BLE001
                    kt = {"error": bk.err_text(exc)}
                rec.setdefault(name, {})[f"B{b}"] = kt
                if "error" in kt:
                    print(f"{op} B={b} {name}: {str(kt['error'])[:200]}")
                    continue
                tot = sum(k["us_per_call"] for k in kt.values())
                print(f"{op} B={b:>2} {name:<22} total {tot:7.2f} us  " +
                      "; ".join(f"{n[:48]} {k['us_per_call']:.2f}us x{k['launches_per_call']:.0f}"
                                f" (tail {k.get('tail_us', float('nan')):.2f}, gap {k.get('gap_us', float('nan')):.2f})"
                                for n, k in kt.items()))
            del sets, outs
            torch.cuda.empty_cache()
        (out_dir / "profile_kernels.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
