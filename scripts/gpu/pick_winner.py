"""From a bench_kernels.py JSON, the candidate to gate next: the best geometric-mean speedup over
the incumbent across the op's rows, if it reaches --min-geomean and is nowhere slower than the
incumbent by more than --max-slower. Prints its full id (nothing if none) and a line per
candidate on stderr.

    python3 scripts/gpu/pick_winner.py $OUT/bench_kernels_moe_router.json moe_router ffcc5b [--min-geomean 1.07]

--scope-points N: the perf gate takes the geometric mean over all N points of the op's scope. For
a bench that measured only the points where the candidates differ (kda's mid windows: 16 of 28),
the geomean is then projected over N with every unmeasured point counted at 1.0. That assumption
holds only where a candidate runs the incumbent's code there, so it is yours to check. Session 19's
d5a02a: 1.044 over the 16 measured points, 1.025 projected over 28.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.agent.prompting import geomean  # noqa: E402


def projected(gm: float, measured: int, scope_points: int | None) -> float:
    """The geomean over scope_points points when the measured ones have geomean gm and the rest
    are counted at 1.0 (a speedup of one)."""
    if not scope_points:
        return gm
    if scope_points < measured:
        raise SystemExit(f"pick_winner: --scope-points {scope_points} is below the {measured} rows measured")
    return gm ** (measured / scope_points)


def pick(rec: dict, incumbent: str, min_geomean: float = 1.07, max_slower: float = 0.03,
         scope_points: int | None = None) -> tuple[str | None, list[str]]:
    """rec: one op's record of a bench_kernels JSON; incumbent: an id prefix. Returns (the winner's
    id or None, one line per other candidate). With scope_points, min_geomean is held against the
    geomean projected over that many points (projected())."""
    ids = {label: info["id"] for label, info in rec["candidates"].items()}
    inc = next((lb for lb, cid in ids.items() if cid.startswith(incumbent)), None)
    if inc is None:
        raise SystemExit(f"pick_winner: incumbent '{incumbent}' is not in the benchmark")
    best, lines = (0.0, None), []
    for label, cid in ids.items():
        if label == inc:
            continue
        ratios = [row["times"][inc]["median_us"] / row["times"][label]["median_us"] for row in rec["rows"]
                  if "median_us" in row["times"].get(label, {}) and "median_us" in row["times"].get(inc, {})]
        if not ratios or len(ratios) < len(rec["rows"]):
            lines.append(f"{label} ({cid}): missing rows")
            continue
        gm = geomean(ratios)
        proj = projected(gm, len(ratios), scope_points)
        ok = proj >= min_geomean and min(ratios) >= 1 - max_slower
        over = f", {proj:.3f} over {scope_points} points" if scope_points else ""
        lines.append(f"{label} ({cid}): geomean {gm:.3f}{over}, worst row {min(ratios):.3f}{' *' if ok else ''}")
        if ok and proj > best[0]:
            best = (proj, cid)
    return best[1], lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("op")
    ap.add_argument("incumbent", help="id prefix of the incumbent candidate")
    ap.add_argument("--min-geomean", type=float, default=1.07)
    ap.add_argument("--max-slower", type=float, default=0.03, help="allowed slowdown at any one row")
    ap.add_argument("--scope-points", type=int, default=None,
                    help="points in the op's scope: project the geomean over them (unmeasured = 1.0)")
    a = ap.parse_args()
    with open(a.bench_json) as f:
        rec = json.load(f)["ops"][a.op]
    winner, lines = pick(rec, a.incumbent, a.min_geomean, a.max_slower, a.scope_points)
    print("\n".join(lines), file=sys.stderr)
    if winner:
        print(winner)


if __name__ == "__main__":
    main()
