"""The registry's own cost per dispatch, on the host: a kernel that does nothing, registered for
the call's scope, so what is timed is routing (kill switch, scope, shape checks), output
allocation and counting. This is the Python overhead every registered op pays per call in an
eager decode step (a captured CUDA graph replays without it). CPU only: the inputs are CPU tensors.

    python scripts/bench_dispatch.py [--calls 2000] [--repeats 5] [--json]

Prints the median over `--repeats` timed loops of `--calls` dispatches, per op.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reference_impls  # noqa: E402
from harness.opdef import Point  # noqa: E402
from harness.registry import KernelScope, Outcome, Registry  # noqa: E402

# (op, point, static key): one call site per kind of op the decoder dispatches
CASES: tuple[tuple[str, Point, dict[str, str]], ...] = (
    ("moe_router", Point(batch=1), {}),
    ("mla_decode", Point(batch=4, context=1000), {}),
    ("kda_decode", Point(batch=4), {}),
    ("skinny_gemm", Point(batch=4, shape="latent_down"), {"shape": "latent_down"}),
)


def _nothing(**tensors: torch.Tensor) -> None:
    """The kernel: returns at once."""


def time_dispatch(op: str, point: Point, static: dict[str, str], calls: int, repeats: int) -> float:
    """Median microseconds per `Registry.run` of `op` at `point` on its in-scope no-op kernel."""
    defn = reference_impls.get(op)
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(0), "cpu")
    reg = Registry()
    reg.register(op, KernelScope(archs=("cpu",), tp=(point.tp,), batch=(1, 64), dtypes=("bf16",)), _nothing)
    for _ in range(50):                                   # warm: imports, memos
        reg.run(op, inputs, tp=point.tp, **static)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            reg.run(op, inputs, tp=point.tp, **static)
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    counts = reg.counters()
    if len(counts) != 1 or next(iter(counts)).outcome is not Outcome.KERNEL:
        raise SystemExit(f"{op}: the calls did not all reach the kernel: {counts}")
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.calls < 1 or args.repeats < 1:
        ap.error("--calls and --repeats must be >= 1")
    rows = [{"op": op, "us_per_dispatch": round(time_dispatch(op, pt, st, args.calls, args.repeats), 2)}
            for op, pt, st in CASES]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            print(f"{r['op']:12s} {r['us_per_dispatch']:7.1f} us per dispatch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
