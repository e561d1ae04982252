"""Launch one candidate at one point a few times, nothing else: the process to wrap in a profiler.

    source scripts/gpu/setup.sh && python3 scripts/gpu/run_once.py OP ID_PREFIX [--batch 1] [--tp 8]
        [--state-dtype fp32] [--shape nb8] [--calls 3]
    e.g. ncu --section WarpStateStats python3 scripts/gpu/run_once.py kda_decode a7f1bb --calls 1

Compiles kernels_generated/OP/<id>/ for the device, makes the op's seeded inputs at the point,
launches it `calls` times (synchronizing after each) and checks the first call against the
reference, so a profile is never taken of a kernel that computes something else.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("candidate", help="candidate id or a unique prefix of it")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--state-dtype", default="fp32")
    ap.add_argument("--shape", default="")
    ap.add_argument("--calls", type=int, default=3)
    args = ap.parse_args()
    import torch

    import reference_impls
    from bench_kernels import check_point, kernel_tensors, load_kernel, static_for
    from harness.opdef import Point

    if not torch.cuda.is_available():
        sys.exit("run_once.py needs a CUDA GPU")
    folders = sorted((ROOT / "kernels_generated" / args.op).glob(f"{args.candidate}*"))
    if len(folders) != 1:
        sys.exit(f"'{args.candidate}' names {len(folders)} candidates of {args.op}, not one")
    defn = reference_impls.get(args.op)
    point = Point(batch=args.batch, tp=args.tp, state_dtype=args.state_dtype or "fp32", shape=args.shape)
    mod = load_kernel(str(folders[0]))
    compiled = mod.compile(args.tp, "--enable-tvm-ffi", **static_for(defn, point))
    first = check_point(defn, mod, compiled, point)          # the first call, against the reference
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(1), "cuda")
    outs = defn.alloc_outputs(point, "cuda")
    for _ in range(args.calls - 1):                          # the rest, on fresh seeded inputs
        mod.launch(compiled, **kernel_tensors(defn, inputs, outs))
        torch.cuda.synchronize()
    print(f"{args.op} {folders[0].name} at {point.label()}: {args.calls} call(s), first call "
          f"{'correct' if first['ok'] else 'WRONG: ' + first['summary']}")
    sys.exit(0 if first["ok"] else 1)


if __name__ == "__main__":
    main()
