"""From a bench_kernels.py JSON, the candidate to gate next: the best geometric-mean speedup over
the incumbent across the op's rows, if it reaches --min-geomean and is nowhere slower than the
incumbent by more than --max-slower. Prints its full id (nothing if none) and a line per
candidate on stderr.

    python3 scripts/gpu/pick_winner.py $OUT/bench_kernels_moe_router.json moe_router ffcc5b [--min-geomean 1.07]
    python3 scripts/gpu/pick_winner.py bench_kernels_skinny_gemm.json skinny_gemm cublas --per-shape [--shape-min 1.05]

The incumbent is a candidate id prefix, or a baseline column of the bench (cublas, eager, compile):
against cuBLAS when no kernel of ours runs at the benchmarked shapes yet.

--per-shape (ops with named shapes): per (shape, TP), each candidate's slowest and fastest speedup
over the incumbent across the batches, then per candidate the shapes where it is at least
--shape-min faster at every batch, at both TPs or at one: the scope a new candidate could declare
(a scope is TPs x shapes, so shapes that win at one TP only need a candidate of their own).

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


def incumbent_column(rec: dict, incumbent: str) -> str:
    """The bench column of `incumbent`: the candidate whose id starts with it, else a baseline
    column of that name (cublas, eager, compile) that the rows have."""
    ids = {label: info["id"] for label, info in rec["candidates"].items()}
    inc = next((lb for lb, cid in ids.items() if cid.startswith(incumbent)), None)
    if inc is None and incumbent not in ids and any(incumbent in row["times"] for row in rec["rows"]):
        inc = incumbent
    if inc is None:
        raise SystemExit(f"pick_winner: incumbent '{incumbent}' is not in the benchmark "
                         f"(candidates: {', '.join(sorted(ids.values())) or 'none'}; or a baseline column)")
    return inc


def per_shape(rec: dict, incumbent: str, shape_min: float = 1.05) -> tuple[list[str], dict[str, dict[str, list[int]]]]:
    """Per (shape, TP) and candidate: the slowest and fastest speedup over the incumbent across the
    batches; and per candidate label, {shape: [TPs where it is >= shape_min at every batch]}."""
    inc = incumbent_column(rec, incumbent)
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rec["rows"]:
        groups.setdefault((row.get("shape", ""), int(row.get("tp", 0))), []).append(row)
    lines: list[str] = []
    wins: dict[str, dict[str, list[int]]] = {}
    for (shape, tp), rows in sorted(groups.items()):
        cells = []
        for label in rec["candidates"]:
            if label == inc:
                continue
            r = [row["times"][inc]["median_us"] / row["times"][label]["median_us"] for row in rows
                 if "median_us" in row["times"].get(label, {}) and "median_us" in row["times"].get(inc, {})]
            if len(r) < len(rows):
                cells.append(f"{label} missing rows")
                continue
            ok = min(r) >= shape_min
            cells.append(f"{label} {min(r):.3f}-{max(r):.3f}{' *' if ok else ''}")
            if ok:
                wins.setdefault(label, {}).setdefault(shape, []).append(tp)
        lines.append(f"{shape or '-'} TP{tp} ({len(rows)} batches): " + "; ".join(cells))
    return lines, wins


def scope_lines(rec: dict, wins: dict[str, dict[str, list[int]]], tps: list[int]) -> list[str]:
    """Per candidate: the shapes it wins at every TP benchmarked, and those it wins at one TP only."""
    out = []
    for label, shapes in wins.items():
        both = [s for s, t in shapes.items() if sorted(t) == sorted(tps)]
        some = [f"{s}@{'/'.join(map(str, t))}" for s, t in shapes.items() if sorted(t) != sorted(tps)]
        out.append(f"{label} ({rec['candidates'][label]['id']}): every batch and TP at {', '.join(both) or 'none'}"
                   + (f"; one TP only at {', '.join(some)}" if some else ""))
    return out


def pick(rec: dict, incumbent: str, min_geomean: float = 1.07, max_slower: float = 0.03,
         scope_points: int | None = None) -> tuple[str | None, list[str]]:
    """rec: one op's record of a bench_kernels JSON; incumbent: an id prefix. Returns (the winner's
    id or None, one line per other candidate). With scope_points, min_geomean is held against the
    geomean projected over that many points (projected())."""
    ids = {label: info["id"] for label, info in rec["candidates"].items()}
    inc = incumbent_column(rec, incumbent)
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
    ap.add_argument("incumbent", help="id prefix of the incumbent candidate, or a baseline column (cublas)")
    ap.add_argument("--min-geomean", type=float, default=1.07)
    ap.add_argument("--max-slower", type=float, default=0.03, help="allowed slowdown at any one row")
    ap.add_argument("--scope-points", type=int, default=None,
                    help="points in the op's scope: project the geomean over them (unmeasured = 1.0)")
    ap.add_argument("--per-shape", action="store_true", help="each candidate's speedup per (shape, TP), "
                    "and the shapes it wins at every batch by --shape-min")
    ap.add_argument("--shape-min", type=float, default=1.05)
    a = ap.parse_args()
    with open(a.bench_json) as f:
        rec = json.load(f)["ops"][a.op]
    if a.per_shape:
        lines, wins = per_shape(rec, a.incumbent, a.shape_min)
        tps = sorted({int(row.get("tp", 0)) for row in rec["rows"]})
        print("\n".join(lines + [""] + (scope_lines(rec, wins, tps) or ["no candidate wins any shape"])))
        return
    winner, lines = pick(rec, a.incumbent, a.min_geomean, a.max_slower, a.scope_points)
    print("\n".join(lines), file=sys.stderr)
    if winner:
        print(winner)


if __name__ == "__main__":
    main()
