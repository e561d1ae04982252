"""From a bench_kernels.py JSON, the candidate to gate next: the best geometric-mean speedup over
the incumbent across the op's rows, if it reaches --min-geomean and is nowhere slower than the
incumbent by more than --max-slower. Prints its full id (nothing if none) and a line per
candidate on stderr.

    python3 scripts/gpu/pick_winner.py $OUT/bench_kernels_moe_router.json moe_router ffcc5b [--min-geomean 1.07]
"""
from __future__ import annotations

import argparse
import json
import math
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("op")
    ap.add_argument("incumbent", help="id prefix of the incumbent candidate")
    ap.add_argument("--min-geomean", type=float, default=1.07)
    ap.add_argument("--max-slower", type=float, default=0.03, help="allowed slowdown at any one row")
    a = ap.parse_args()
    rec = json.load(open(a.bench_json))["ops"][a.op]
    ids = {label: info["id"] for label, info in rec["candidates"].items()}
    inc = next(lb for lb, cid in ids.items() if cid.startswith(a.incumbent))
    best = (0.0, None)
    for label, cid in ids.items():
        if label == inc:
            continue
        ratios = []
        for row in rec["rows"]:
            t = row["times"]
            if "median_us" in t.get(label, {}) and "median_us" in t.get(inc, {}):
                ratios.append(t[inc]["median_us"] / t[label]["median_us"])
        if not ratios or len(ratios) < len(rec["rows"]):
            print(f"{label}: missing rows", file=sys.stderr)
            continue
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        ok = gm >= a.min_geomean and min(ratios) >= 1 - a.max_slower
        print(f"{label} ({cid}): geomean {gm:.3f}, worst row {min(ratios):.3f}{' *' if ok else ''}", file=sys.stderr)
        if ok and gm > best[0]:
            best = (gm, cid)
    if best[1]:
        print(best[1])


if __name__ == "__main__":
    main()
