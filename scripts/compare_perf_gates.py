"""Is a replacement faster than the kernel it replaced, point by point, in their own perf gates?

    python scripts/compare_perf_gates.py OP OLD NEW [--json]

OLD and NEW are candidate ids (or unique prefixes) of OP. Each one's newest evidence record whose
perf_sweep passed is read (kernels_generated/<op>/<id>/evidence/); at every sweep point both gates
timed, the ratio NEW / OLD of their roofline fractions (the point's HBM floor over its time, each
floor from the bandwidth its own run measured) says how much faster NEW ran there (1.10: 10% faster).

Why: a same-scope replacement is gated against the reference after its incumbent's demotion (the
perf gate's geomean over all points would dilute a B 16..64 gain with the B <= 8 points where both
run the same code), so whether it beats its incumbent rests on benches. This reads what the two
gates measured, with no GPU. Two gates ran on different days and possibly different cards: the
output names both, and a ratio across cards says less than one bench that times both.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import evidence, paths  # noqa: E402
from harness.errors import UserError  # noqa: E402
from harness.toolchain.candidate import load_candidate  # noqa: E402

BATCH = re.compile(r"\bB=(\d+)\b")


@dataclass(frozen=True)
class PerfGate:
    candidate: str
    record: str            # file name of the evidence record
    gpu: str
    geomean_speedup: float
    fraction_by_point: dict[str, float]


@dataclass(frozen=True)
class PointRatio:
    point: str
    batch: int
    old_fraction: float
    new_fraction: float
    ratio: float           # new / old: > 1 when NEW ran the point faster


def resolve(op: str, ref: str) -> str:
    """A candidate id from an id or unique prefix, as every harness command takes one
    (`load_candidate`); UserError (one line) otherwise."""
    return load_candidate(op, ref).id


def newest_perf_gate(root: Path, op: str, candidate: str) -> PerfGate:
    """The newest record of the candidate whose perf_sweep passed; ValueError if it has none."""
    for path, rec in reversed(evidence.records(root, op, candidate)):
        if isinstance(rec, evidence.EvidenceError):
            continue
        gate = rec.gate("perf_sweep")
        if gate is None or gate.verdict != "pass":
            continue
        n = gate.numbers
        fractions = {p["point"]: float(p["roofline_fraction"]) for p in n.get("per_point", [])
                     if p.get("roofline_fraction")}
        return PerfGate(candidate, path.name, str(n.get("gpu", rec.hardware.get("gpu", "?"))),
                        float(n.get("geomean_speedup", 0.0)), fractions)
    raise ValueError(f"{op}/{candidate}: no evidence record with a passing perf_sweep")


def compare(old: PerfGate, new: PerfGate) -> list[PointRatio]:
    out = []
    for point, f_old in old.fraction_by_point.items():
        f_new = new.fraction_by_point.get(point)
        if f_new is None:
            continue
        m = BATCH.search(point)
        out.append(PointRatio(point, int(m.group(1)) if m else 0, f_old, f_new, f_new / f_old))
    return sorted(out, key=lambda r: (r.batch, r.point))


def summary(ratios: list[PointRatio]) -> dict[int, tuple[int, float, float, float]]:
    """Per batch: points, median, min and max ratio."""
    by_b: dict[int, list[float]] = {}
    for r in ratios:
        by_b.setdefault(r.batch, []).append(r.ratio)
    return {b: (len(v), statistics.median(v), min(v), max(v)) for b, v in sorted(by_b.items())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("old", help="the replaced kernel's id (or unique prefix)")
    ap.add_argument("new", help="the replacement's id (or unique prefix)")
    ap.add_argument("--json", action="store_true", help="print the gates and per-point ratios as JSON")
    a = ap.parse_args(argv)
    root = paths.root()            # where load_candidate looks (HARNESS_ROOT, else this checkout)
    try:
        old = newest_perf_gate(root, a.op, resolve(a.op, a.old))
        new = newest_perf_gate(root, a.op, resolve(a.op, a.new))
    except (UserError, ValueError) as exc:
        print(f"compare_perf_gates: {exc}", file=sys.stderr)
        return 2
    ratios = compare(old, new)
    if not ratios:
        print("compare_perf_gates: the two perf gates share no sweep point", file=sys.stderr)
        return 1
    if a.json:
        gates = {tag: {k: v for k, v in asdict(g).items() if k != "fraction_by_point"}   # the points are below
                 for tag, g in (("old", old), ("new", new))}
        print(json.dumps(gates | {"points": [asdict(r) for r in ratios]}, indent=1))
        return 0
    for tag, g in (("old", old), ("new", new)):
        print(f"{tag}: {a.op}/{g.candidate} {g.record} on {g.gpu}, geomean {g.geomean_speedup:.2f}x the reference")
    if old.gpu != new.gpu:
        print("note: the two gates ran on different cards; a bench timing both in one run says more")
    print(f"{'point':60s} {'old':>6s} {'new':>6s} {'new/old':>8s}")
    for r in ratios:
        print(f"{r.point:60s} {r.old_fraction:6.3f} {r.new_fraction:6.3f} {r.ratio:8.3f}")
    print("per batch: points, median (min-max) of new/old")
    for b, (n, med, lo, hi) in summary(ratios).items():
        print(f"  B={b:<3d} {n:3d}  {med:.3f} ({lo:.3f}-{hi:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
