"""Does the grouping of bench_kernels.py's timing move a kernel against torch.compile?

Session 36 split bench_kernels.py's interleave into two groups (the kernels; eager and
torch.compile), and each group subtracts its own separator median (timing.time_interleaved,
`separate`). Session 37's cold run then read torch.compile 0.3-6% faster than situ_and_mul's
59ea06 at TP8 B=1, 2, 64, where one group had read it 7-13% slower, and torch.profiler's device
timeline read 59ea06 the shorter kernel (1.56 against 1.74 us at B=64). This probe times one
candidate (K, and the same kernel.py loaded again: K2) and torch.compile of the reference (C, and
the same compiled function in a second graph: C2) at each point in five arrangements, each
repeated (K2, and C2 with --compile-into-outputs, write a second set of rotated outputs, so an A/A
that reads off 1.00 may also be those buffers' placement in L2):

    split      [K] then [C]     (bench_kernels.py since session 36)
    joint      [K, C]           (one interleave, as before session 36)
    joint_rev  [C, K]
    aa_k       [K, K2]          (A/A: should read 1.00)
    aa_c       [C, C2]          (A/A: should read 1.00)

and prints C/K per arrangement with each group's separator median (what the group subtracted).

    OUT=/tmp/out python scripts/gpu/group_probe.py --op situ_and_mul --candidate 59ea06 --batches 1,2,64
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

ARRANGEMENTS: dict[str, list[tuple[str, ...]]] = {
    "split": [("K",), ("C",)],
    "joint": [("K", "C")],
    "joint_rev": [("C", "K")],
    "aa_k": [("K", "K2")],
    "aa_c": [("C", "C2")],
}


def timed_group(impls: dict, n_sets: int, calls: int, rounds: int) -> tuple[dict[str, float], float]:
    """timing.time_interleaved's separated timing, returning the impls' medians and the
    separator median the group subtracted (time_interleaved keeps the latter to itself)."""
    import torch

    from harness.toolchain import timing

    calls = timing.graph_calls(calls, n_sets)
    buf = torch.zeros(1, dtype=torch.int32, device="cuda")
    runs = dict(impls)
    runs[timing.SEPARATOR] = lambda i: None
    names = list(runs)

    def separator() -> None:
        buf.add_(1)

    graphs = {n: timing.capture_graph(runs[n], n_sets, calls, 3, separator) for n in names}
    for n in names:
        graphs[n].replay()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for idx in timing.interleave_order(len(names), rounds):
        samples[names[idx]].append(timing.elapsed_us(graphs[names[idx]].replay) / calls)
    sep = statistics.median(samples.pop(timing.SEPARATOR))
    return {n: statistics.median([v - sep for v in vals]) for n, vals in samples.items()}, sep


def median_ratios(rows: list[dict], batch: int) -> dict[str, tuple[str, str, float]]:
    """Per arrangement timed at `batch`: (second, first, median over repeats of second / first),
    first and second in the arrangement's order (split: C/K; joint_rev: K/C; A/A: copy / original)."""
    out = {}
    for name, groups in ARRANGEMENTS.items():
        rs = [x for x in rows if x["batch"] == batch and x["arrangement"] == name]
        if rs:
            first, second = [k for g in groups for k in g][:2]
            out[name] = (second, first, statistics.median(x["us"][second] / x["us"][first] for x in rs))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--shape", default="")
    ap.add_argument("--state-dtype", default="")
    ap.add_argument("--batches", default="1,2,64")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-copies", type=int, default=4096)
    ap.add_argument("--compile-into-outputs", action="store_true",
                    help="C and C2 write into rotated output buffers (gpu_eval.compiled_reference), not functional")
    a = ap.parse_args(argv)

    import torch

    import bench_kernels as bk
    import reference_impls
    from harness.opdef import Point
    from harness.toolchain.gpu_eval import compiled_reference

    os.environ.setdefault("CUTE_DSL_ARCH", bk.arch_of_device())
    defn = reference_impls.get(a.op)
    cands = bk.human_candidates(a.op, (a.candidate,))
    if len(cands) != 1:
        raise SystemExit(f"{a.op}: '{a.candidate}' names {len(cands)} candidates, not one")
    mods = [bk.load_kernel(cands[0]["path"]) for _ in range(2)]
    compiled: Callable[..., Any] = (compiled_reference(defn, dynamic=None) if a.compile_into_outputs
                                    else torch.compile(defn.reference))
    rows = []
    for b in (int(x) for x in a.batches.split(",")):
        pt = Point(batch=b, tp=a.tp, shape=a.shape, state_dtype=a.state_dtype)
        sets, outs = bk.rotated_sets(defn, pt, a.max_copies)
        outs2 = [defn.alloc_outputs(pt, "cuda") for _ in sets]
        ks = [m.compile(a.tp, "--enable-tvm-ffi", **bk.static_for(defn, pt)) for m in mods]
        impls = {"K": lambda i: mods[0].launch(ks[0], **bk.kernel_tensors(defn, sets[i], outs[i])),
                 "K2": lambda i: mods[1].launch(ks[1], **bk.kernel_tensors(defn, sets[i], outs2[i])),
                 "C": (lambda i: compiled(sets[i], outs[i])) if a.compile_into_outputs else (lambda i: compiled(**sets[i])),
                 "C2": (lambda i: compiled(sets[i], outs2[i])) if a.compile_into_outputs else (lambda i: compiled(**sets[i]))}
        for f in impls.values():
            f(0)
        torch.cuda.synchronize()
        for name, groups in ARRANGEMENTS.items():
            for r in range(a.repeats):
                med: dict[str, float] = {}
                seps = []
                for g in groups:
                    m, sep = timed_group({k: impls[k] for k in g}, len(sets), bk.CALLS_PER_GRAPH, a.rounds)
                    med.update(m)
                    seps.append(sep)
                row = {"batch": b, "arrangement": name, "repeat": r, "us": med, "separator_us": seps, "n_sets": len(sets)}
                rows.append(row)
                print(f"B={b:<3} {name:10s} r{r} " + " ".join(f"{k} {v:.3f}" for k, v in med.items())
                      + "  sep " + "/".join(f"{s:.3f}" for s in seps), flush=True)
        for name, (second, first, ratio) in median_ratios(rows, b).items():
            print(f"B={b:<3} {name:10s} median {second}/{first} {ratio:.3f}", flush=True)
        del sets, outs, outs2
        torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{a.op}_tp{a.tp}" + ("_into" if a.compile_into_outputs else "")
    (out / f"group_probe_{tag}.json").write_text(json.dumps(
        {"op": a.op, "candidate": cands[0]["label"], "tp": a.tp, "compile_into_outputs": a.compile_into_outputs,
         "rows": rows}, indent=1))
    return {"rows": rows}


if __name__ == "__main__":
    main()
