"""Read the per-instruction CSV of scripts/gpu/profile_source.sh and print where the warps stalled.

    python scripts/sass_stalls.py TAG_warm_sass.csv [--min-share 0.01] [--context 0]

Prints the total of PC samples by stall reason, then every SASS instruction holding at least
`--min-share` of the samples (its index in the listing, its samples, share, top reasons), with
`--context` instructions before it, so a stall is read next to the load or barrier it waits on.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Instr:
    index: int
    sass: str
    samples: int
    executed: int
    stalls: dict[str, int] = field(default_factory=dict)


def read(path: Path) -> list[Instr]:
    rows = list(csv.reader(path.open()))
    header_at = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if header_at is None:
        sys.exit(f"{path}: no 'Address' header row: not an ncu source page CSV")
    header = rows[header_at]
    col = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and not n.endswith("(Not Issued)")]
    out = []
    for i, r in enumerate(rows[header_at + 1:]):
        if len(r) != len(header):
            continue
        num = lambda name: int(float(r[col[name]] or 0)) if r[col[name]] not in ("", "-") else 0  # noqa: E731
        out.append(Instr(i, r[col["Source"]].strip(), num("Warp Stall Sampling (All Samples)"),
                         num("Instructions Executed"), {n[6:]: num(n) for n in reasons}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--min-share", type=float, default=0.01)
    ap.add_argument("--context", type=int, default=0)
    args = ap.parse_args()
    instrs = read(args.csv)
    total = sum(x.samples for x in instrs) or 1
    by_reason: dict[str, int] = {}
    for x in instrs:
        for k, v in x.stalls.items():
            by_reason[k] = by_reason.get(k, 0) + v
    print(f"{args.csv.name}: {len(instrs)} instructions, {total} samples")
    print("  " + ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(by_reason.items(), key=lambda kv: -kv[1]) if v))
    shown: set[int] = set()
    for x in instrs:
        if x.samples / total < args.min_share:
            continue
        for y in instrs[max(0, x.index - args.context):x.index + 1]:
            if y.index in shown:
                continue
            shown.add(y.index)
            top = sorted(((v, k) for k, v in y.stalls.items() if v), reverse=True)[:3]
            mark = "*" if y is x else " "
            print(f"{mark}{y.index:5d} {y.samples:6d} {y.samples / total:6.1%}  {y.sass[:60]:60s} "
                  + " ".join(f"{k}:{v}" for v, k in top))


if __name__ == "__main__":
    main()
