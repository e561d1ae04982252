"""A/A probe of the agent loop's timing (harness/toolchain/gpu_eval.time_point): one kernel.py is
loaded twice, as two modules, and timed as "kernel" and "incumbent" beside the eager reference in
several orders of the interleave. Both sides run the same code on the same inputs, so
incumbent / kernel should read 1.00; a steady departure is a bias of the timing, not of a kernel.

    OUT=/tmp/out python scripts/gpu/aa_probe.py --op skinny_gemm --candidate c8b7a7 --shape mla_qkv_a --batches 1,8

Session 36 found `harness eval skinny_gemm 7b9dd5 --vs promoted` reading 0.97 at mla_qkv_a against
c8b7a7, whose kernel.py is byte-identical (results/h200/session36/eval_vs_promoted.log).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

ORDERS = {
    "K R I (eval)": ("kernel", "reference", "incumbent"),
    "I R K": ("incumbent", "reference", "kernel"),
    "K I": ("kernel", "incumbent"),
    "K I R": ("kernel", "incumbent", "reference"),
}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--shape", default="")
    ap.add_argument("--state-dtype", default="fp32")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    import torch

    from harness.registry import device_arch
    os.environ["CUTE_DSL_ARCH"] = device_arch(torch.device("cuda"))
    import reference_impls
    from harness.opdef import Point
    from harness.toolchain import gpu_eval
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.compile import COMPILE_OPTIONS, static_for_point
    from harness.toolchain.timing import time_interleaved

    defn = reference_impls.get(a.op)
    cand = load_candidate(a.op, a.candidate)
    rows: list[dict] = []
    for b in (int(x) for x in a.batches.split(",")):
        pt = Point(batch=b, tp=a.tp, shape=a.shape, state_dtype=a.state_dtype)
        static = static_for_point(defn, pt)
        fns = [gpu_eval._load_incumbent(str(cand.kernel_path), i, {"options": COMPILE_OPTIONS}, pt, static)
               for i in (0, 1)]
        sets, outs, _, _ = gpu_eval.rotated_inputs(defn, pt, seed=1)
        n = len(sets)
        impls = {"kernel": lambda i: fns[0][0](fns[0][1], **sets[i], **outs[i]),
                 "incumbent": lambda i: fns[1][0](fns[1][1], **sets[i], **outs[i]),
                 "reference": lambda i: defn.reference(**sets[i])}
        for name, order in ORDERS.items():
            for r in range(a.repeats):
                st = time_interleaved({k: impls[k] for k in order}, n_sets=n)
                k, i = st["kernel"].median_us, st["incumbent"].median_us
                row = {"batch": b, "order": name, "repeat": r, "kernel_us": k, "incumbent_us": i, "ratio": i / k,
                       "kernel_spread_pct": st["kernel"].spread_pct, "incumbent_spread_pct": st["incumbent"].spread_pct,
                       "n_sets": n}
                rows.append(row)
                print(f"B={b:<3} {name:14s} r{r}  kernel {k:7.2f}  incumbent {i:7.2f}  I/K {i / k:.3f}  "
                      f"spread {row['kernel_spread_pct']:.1f}/{row['incumbent_spread_pct']:.1f}%", flush=True)
        for name in ORDERS:
            rs = [x["ratio"] for x in rows if x["batch"] == b and x["order"] == name]
            print(f"B={b:<3} {name:14s} median I/K {statistics.median(rs):.3f}", flush=True)
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    tag = f"{a.op}_{a.shape or 'default'}"
    (out / f"aa_probe_{tag}.json").write_text(json.dumps({"op": a.op, "candidate": cand.id, "rows": rows}, indent=1))
    return {"rows": rows}


if __name__ == "__main__":
    main()
