"""Time kernel.py variants of one op side by side, correct or not: a diagnostic, not a benchmark
of candidates (bench_kernels.py times only candidates that pass their check, and only committed
ones).

A diagnostic variant changes a kernel to learn where its time goes, e.g. every lane reading token
0's activations (same loads, B=1's traffic, wrong answers): its time says what the traffic it
removed cost. Each variant is a folder holding a kernel.py (any path, committed or scratch).

    OUT=/tmp/out python scripts/gpu/diag_probe.py --op skinny_gemm --shape mla_qkv_a --tp 8 \
        --batches 1,2,4,8 --kernels kernels_generated/skinny_gemm/c8b7a753866a,/tmp/v/x0

Per point: every variant's correctness against the reference (recorded, never a reason to skip
it) and its time, all variants in one interleaved group (timing.time_interleaved: CUDA-graph
replay, A B B A, median), inputs rotated past 3 x L2 as in bench_kernels.py (--max-copies). A
variant whose compile or first launch raises is recorded with its error and left out of that
point's group. Prints each variant's median and its ratio to the first one timed; rewrites
$OUT/diag_<op>_<shape>_tp<T>[_<state dtype>].json (record_name) after every point, so a run cut
short keeps the points before it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def label_of(folder: str) -> str:
    """A variant's name in the tables: its folder's name."""
    return Path(folder).name


def variant_folders(spec: str) -> dict[str, str]:
    """--kernels "a,b,..." -> {name: folder}, in order (the first is the base of the ratios). Each
    folder must hold a kernel.py and the names must differ: SystemExit with the reason otherwise."""
    folders = [f for f in (x.strip() for x in spec.split(",")) if f]
    if not folders:
        raise SystemExit("diag_probe: --kernels names no folder")
    missing = [f for f in folders if not (Path(f) / "kernel.py").is_file()]
    if missing:
        raise SystemExit(f"diag_probe: no kernel.py in {', '.join(missing)}")
    labels = [label_of(f) for f in folders]
    if len(set(labels)) != len(labels):
        raise SystemExit(f"diag_probe: variant folders need distinct names, got {labels}")
    return dict(zip(labels, folders))


def batch_list(spec: str) -> list[int]:
    """--batches "1,8" -> [1, 8]; SystemExit on anything but positive integers."""
    try:
        out = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise SystemExit(f"diag_probe: --batches wants positive integers like 1,8, got {spec!r}")
    return out


def record_name(op: str, shape: str, tp: int, state_dtype: str = "") -> str:
    """The JSON record's file name under $OUT: one per op, shape, TP and (ops with several) state dtype,
    so the runs of one device call keep their own records."""
    return f"diag_{op}_{shape or 'default'}_tp{tp}{'_' + state_dtype if state_dtype else ''}.json"


def error_text(exc: BaseException) -> str:
    """One line for a variant that could not run at a point."""
    return f"{type(exc).__name__}: {exc}"[:300]


def ratios(medians: dict[str, float]) -> dict[str, float]:
    """Each variant's median over the first one's (the first is the base of the comparison)."""
    base = next(iter(medians.values()))
    return {n: (m / base if base > 0 else float("nan")) for n, m in medians.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", required=True)
    ap.add_argument("--kernels", required=True, help="comma list of folders, each with a kernel.py; the first is the base")
    ap.add_argument("--shape", default="")
    ap.add_argument("--state-dtype", default="fp32")
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-copies", type=int, default=4096)
    a = ap.parse_args(argv)
    variants = variant_folders(a.kernels)          # the user's mistakes first, before any GPU work
    batches = batch_list(a.batches)
    import reference_impls
    if a.op not in reference_impls.OP_NAMES:
        raise SystemExit(f"diag_probe: no op {a.op!r} (known: {', '.join(reference_impls.OP_NAMES)})")

    import torch

    from harness.registry import device_arch
    os.environ["CUTE_DSL_ARCH"] = device_arch(torch.device("cuda"))
    from bench_kernels import (CALLS_PER_GRAPH, check_point, kernel_tensors, load_kernel, rotated_sets, static_for,
                               with_state_dtype)
    from harness.opdef import Point
    from harness.toolchain.timing import time_interleaved

    defn = reference_impls.get(a.op)
    sdt = a.state_dtype if len(defn.state_dtypes) > 1 else ""
    mods = {lab: load_kernel(f) for lab, f in variants.items()}
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    rec = {"op": a.op, "shape": a.shape, "tp": a.tp, "state_dtype": sdt, "kernels": variants, "rounds": a.rounds,
           "gpu": torch.cuda.get_device_name(0), "rows": []}
    def point(b: int) -> Point:
        return with_state_dtype(Point(batch=b, tp=a.tp, shape=a.shape), sdt)

    # the static key (TP, shape, state dtype) is the same at every batch: one compile per variant
    static = static_for(defn, point(batches[0]))
    compiled, compile_errors = {}, {}
    for lab, m in mods.items():
        try:
            compiled[lab] = m.compile(a.tp, "--enable-tvm-ffi", **static)
        except Exception as exc:  # noqa: BLE001 - recorded at every point; the other variants still run
            compile_errors[lab] = error_text(exc)
    for b in batches:
        pt = point(b)
        entries: dict[str, dict] = {}
        runnable = {}
        for lab, m in mods.items():
            if lab in compile_errors:
                entries[lab] = {"ok": False, "error": compile_errors[lab]}
                continue
            try:
                chk = check_point(defn, m, compiled[lab], pt)
                entries[lab] = {"ok": chk["ok"], "check": chk["summary"]}
                runnable[lab] = compiled[lab]
            except Exception as exc:  # noqa: BLE001 - recorded; the other variants still run
                entries[lab] = {"ok": False, "error": error_text(exc)}
        sets, outs = rotated_sets(defn, pt, a.max_copies)
        impls = {lab: (lambda i, m=mods[lab], c=c: m.launch(c, **kernel_tensors(defn, sets[i], outs[i])))
                 for lab, c in runnable.items()}
        st = time_interleaved(impls, len(sets), calls_per_graph=CALLS_PER_GRAPH, rounds=a.rounds) if impls else {}
        rel = ratios({lab: s.median_us for lab, s in st.items()}) if st else {}
        for lab, s in st.items():
            entries[lab].update(median_us=s.median_us, vs_first=rel[lab], stats=s.as_dict())
        rec["rows"].append({"batch": b, "tp": a.tp, "shape": a.shape, "n_sets": len(sets), "variants": entries})
        (out / record_name(a.op, a.shape, a.tp, sdt)).write_text(json.dumps(rec, indent=1))
        for lab, e in entries.items():
            if "median_us" in e:
                print(f"B={b:<3} {lab:24s} {e['median_us']:8.3f} us  x{e['vs_first']:.3f}  {'ok' if e['ok'] else 'WRONG'}",
                      flush=True)
            else:
                print(f"B={b:<3} {lab:24s} not run: {e['error']}", flush=True)
        del sets, outs
        torch.cuda.empty_cache()
    return rec


if __name__ == "__main__":
    main()
