"""Summarise scripts/gpu/diag_probe.py records (CPU): each variant's time over the base's at every
point the records hold, and the geomean of a plan that runs one variant over a range of batches.

    python scripts/diag_summary.py results/h200/session40/call2/*.json.xz results/h200/session40/call3/*.json.xz \
        [--base ar_base] [--plan ar_c7@1-32 --plan ar_c7L7@64] [--json]

A point is (op, TP, shape, state dtype, B). A ratio is a variant's median over the base's median in
the SAME interleaved group (row), never across rows or calls. Where several records time a variant
at a point, the last file named wins for that variant (a later call re-measuring it); the other
variants keep their ratios from the earlier rows. The base defaults to the first variant of
the first record (diag_probe's own base). --plan NAME@LO-HI (or NAME@B) takes NAME's ratio at the
points with LO <= B <= HI; several --plan give a composite (a hybrid's plans by batch), whose
geomean is over every point a plan covers. A variant that was wrong at a point (its check failed)
is counted in `wrong`: its time still enters the ratios, since diagnostics break answers on purpose.
This is how session 40 projected attn_res's 7 x 128 plans (0.940) before gating them.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.agent.prompting import geomean  # noqa: E402
from harness.scorecard import load_result  # noqa: E402

PointKey = tuple[str, int, str, str, int]          # op, tp, shape, state dtype, batch


@dataclass(frozen=True)
class VariantSummary:
    name: str
    points: int
    geomean: float
    low: float
    high: float
    wrong: int


@dataclass(frozen=True)
class PlanSummary:
    plans: list[str]
    points: int
    geomean: float
    low: float
    high: float
    missing: list[str]                          # "NAME at op TP shape B": a plan point not measured


def load_record(path: Path) -> dict:
    """One diag_probe record (plain or .xz); ValueError (one line) if it is none."""
    data = load_result(path)
    if data is None:
        raise ValueError(f"{path}: not a readable JSON object")
    if not isinstance(data.get("rows"), list) or "kernels" not in data:
        raise ValueError(f"{path}: not a diag_probe record (no rows / kernels)")
    return data


def ratios_by_point(records: list[dict], base: str | None) -> tuple[str, dict[PointKey, dict[str, tuple[float, bool]]]]:
    """(base, {point: {variant: (median over the base's median in the same row, ok)}}); a later
    record replaces an earlier one's ratio variant by variant. Rows where the base has no time are
    skipped."""
    if base is None:
        base = next(iter(records[0]["kernels"]), None) if records else None
    if base is None:
        raise ValueError("no variants in the records")
    out: dict[PointKey, dict[str, tuple[float, bool]]] = {}
    for rec in records:
        for row in rec["rows"]:
            ents = row.get("variants", {})
            ref = ents.get(base, {}).get("median_us")
            if not ref:
                continue
            key = (rec["op"], int(row["tp"]), row.get("shape") or "", rec.get("state_dtype") or "", int(row["batch"]))
            out.setdefault(key, {}).update(
                {name: (e["median_us"] / ref, bool(e.get("ok"))) for name, e in ents.items() if "median_us" in e})
    return base, out


def summarise_variants(table: dict[PointKey, dict[str, tuple[float, bool]]]) -> list[VariantSummary]:
    names: list[str] = []
    for ents in table.values():
        names += [n for n in ents if n not in names]
    out = []
    for n in names:
        vals = [ents[n] for ents in table.values() if n in ents]
        rs = [r for r, _ in vals]
        out.append(VariantSummary(n, len(rs), geomean(rs), min(rs), max(rs), sum(1 for _, ok in vals if not ok)))
    return out


def parse_plan(spec: str) -> tuple[str, int, int]:
    """"name@1-32" -> ("name", 1, 32); "name@64" -> ("name", 64, 64); ValueError otherwise."""
    name, sep, rng = spec.rpartition("@")
    lo, dash, hi = rng.partition("-")
    try:
        lo_b, hi_b = int(lo), int(hi if dash else lo)
    except ValueError:
        lo_b = hi_b = 0
    if not sep or not name or lo_b < 1 or hi_b < lo_b:
        raise ValueError(f"--plan wants NAME@LO-HI or NAME@B with 1 <= LO <= HI, got '{spec}'")
    return name, lo_b, hi_b


def summarise_plan(table: dict[PointKey, dict[str, tuple[float, bool]]], plans: list[str]) -> PlanSummary:
    """The composite: at each point, the ratio of the plan whose batch range holds its B (the first
    such plan); a point no plan covers is left out, a covered point without that variant is missing."""
    parsed = [parse_plan(p) for p in plans]
    rs, missing = [], []
    for key in sorted(table):
        b = key[-1]
        plan = next((n for n, lo, hi in parsed if lo <= b <= hi), None)
        if plan is None:
            continue
        if plan in table[key]:
            rs.append(table[key][plan][0])
        else:
            missing.append(f"{plan} at {key[0]} TP{key[1]} {key[2] or '-'} B={b}")
    if not rs:
        raise ValueError(f"no point of the records is covered by {', '.join(plans)}")
    return PlanSummary(list(plans), len(rs), geomean(rs), min(rs), max(rs), missing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="+", type=Path)
    ap.add_argument("--base", default=None, help="the variant the ratios divide by (default: the first record's first)")
    ap.add_argument("--plan", action="append", default=[], metavar="NAME@LO-HI")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        base, table = ratios_by_point([load_record(p) for p in a.records], a.base)
        if not table:
            raise ValueError(f"no row of the records has a time for the base '{base}'")
        variants = summarise_variants(table)
        plan = summarise_plan(table, a.plan) if a.plan else None
    except ValueError as exc:
        print(f"diag_summary: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({"base": base, "points": len(table), "variants": [asdict(v) for v in variants],
                          "plan": asdict(plan) if plan else None}, indent=1))
        return 0
    print(f"{len(table)} points, ratios over {base} in the same interleaved group")
    print(f"{'variant':24s} {'points':>6s} {'geomean':>8s} {'min':>6s} {'max':>6s} {'wrong':>5s}")
    for v in variants:
        print(f"{v.name:24s} {v.points:6d} {v.geomean:8.3f} {v.low:6.3f} {v.high:6.3f} {v.wrong:5d}")
    if plan:
        print(f"plan {' + '.join(plan.plans)}: {plan.points} points, geomean {plan.geomean:.3f} "
              f"({plan.low:.3f}-{plan.high:.3f})")
        for m in plan.missing:
            print(f"  not measured: {m}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
