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

--propose (with --per-shape): at each (shape, TP) the candidate with the best geometric mean over
the batches among those that win there, grouped into human-candidate entries (one per candidate
and TP set: its family and params from the bench JSON, the shapes it was given, the benchmarked
batch range) printed as JSON. --exclude-shapes leaves shapes out: a name at every TP (skinny_gemm's
shared_gate_up: the fused gemm_situ_and_mul runs there), "shape@tp" at one (a point a promoted
kernel already covers). A candidate whose params lie outside its family's
declared space (a render_variant.py --outside-space study) is never proposed: its points go to the
best of the others, and stderr names what it won. --write FILE (prompts/kernels/human_candidates.json) also
appends them there, each checked first against its family's declared space and scope; then
`python prompts/kernels/render_human.py --op OP` renders them.

--scope-points N: the perf gate takes the geometric mean over all N points of the op's scope. For
a bench that measured only the points where the candidates differ (kda's mid windows: 16 of 28),
the geomean is then projected over N with every unmeasured point counted at 1.0. That assumption
holds only where a candidate runs the incumbent's code there, so it is yours to check. Session 19's
d5a02a: 1.044 over the 16 measured points, 1.025 projected over 28.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
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


Speedups = dict[tuple[str, int], tuple[list[int], dict[str, list[float] | None]]]


def shape_speedups(rec: dict, incumbent: str) -> Speedups:
    """Per (shape, TP): the benchmarked batches, and per candidate label (the incumbent left out)
    its speedups over the incumbent at those batches, or None where a batch lacks a time of either."""
    inc = incumbent_column(rec, incumbent)
    groups: dict[tuple[str, int], list[dict]] = {}
    for row in rec["rows"]:
        groups.setdefault((row.get("shape", ""), int(row.get("tp", 0))), []).append(row)
    out: Speedups = {}
    for key, rows in sorted(groups.items()):
        by_label: dict[str, list[float] | None] = {}
        for label in rec["candidates"]:
            if label == inc:
                continue
            r = [row["times"][inc]["median_us"] / row["times"][label]["median_us"] for row in rows
                 if "median_us" in row["times"].get(label, {}) and "median_us" in row["times"].get(inc, {})]
            by_label[label] = r if len(r) == len(rows) else None
        out[key] = (sorted(int(row.get("batch", 0)) for row in rows), by_label)
    return out


def per_shape(rec: dict, incumbent: str, shape_min: float = 1.05,
              speedups: Speedups | None = None) -> tuple[list[str], dict[str, dict[str, list[int]]]]:
    """Per (shape, TP) and candidate: the slowest and fastest speedup over the incumbent across the
    batches; and per candidate label, {shape: [TPs where it is >= shape_min at every batch]}.
    speedups: shape_speedups(rec, incumbent), when the caller has it already."""
    if speedups is None:
        speedups = shape_speedups(rec, incumbent)
    lines: list[str] = []
    wins: dict[str, dict[str, list[int]]] = {}
    for (shape, tp), (batches, by_label) in speedups.items():
        cells = []
        for label, r in by_label.items():
            if r is None:
                cells.append(f"{label} missing rows")
                continue
            ok = min(r) >= shape_min
            cells.append(f"{label} {min(r):.3f}-{max(r):.3f}{' *' if ok else ''}")
            if ok:
                wins.setdefault(label, {}).setdefault(shape, []).append(tp)
        lines.append(f"{shape or '-'} TP{tp} ({len(batches)} batches): " + "; ".join(cells))
    return lines, wins


def propose(rec: dict, op: str, incumbent: str, shape_min: float = 1.05,
            exclude_shapes: tuple[str, ...] = (), speedups: Speedups | None = None,
            exclude_labels: frozenset[str] = frozenset()) -> list[dict]:
    """Human-candidate entries that cover every (shape, TP) some candidate wins by shape_min at
    every batch: each such point goes to the winner with the best geometric mean there, and each
    candidate's points become one entry per set of TPs (a scope is TPs x shapes). The batch range
    is the benchmarked one. Entries keep the bench's family and params; the label names the source
    candidate and the TPs. speedups: as for per_shape. exclude_shapes: "shape" (every TP) or
    "shape@tp" (that TP only). exclude_labels: candidates never proposed (outside_space's
    studies), so their points go to the best of the others."""
    if speedups is None:
        speedups = shape_speedups(rec, incumbent)
    best: dict[tuple[str, int], str] = {}
    batches_at: dict[tuple[str, int], list[int]] = {}
    for (shape, tp), (batches, by_label) in speedups.items():
        if shape in exclude_shapes or f"{shape}@{tp}" in exclude_shapes:
            continue
        won = {lb: geomean(r) for lb, r in by_label.items()
               if r is not None and min(r) >= shape_min and lb not in exclude_labels}
        if won:
            best[(shape, tp)] = max(sorted(won), key=lambda lb: won[lb])
            batches_at[(shape, tp)] = batches
    tps_of: dict[tuple[str, str], list[int]] = {}          # (label, shape) -> TPs it got
    for (shape, tp), label in sorted(best.items()):
        tps_of.setdefault((label, shape), []).append(tp)
    groups: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for (label, shape), tps in tps_of.items():
        groups.setdefault((label, tuple(tps)), []).append(shape)
    all_tps = sorted({int(row.get("tp", 0)) for row in rec["rows"]})
    entries = []
    for (label, tp_set), shapes in sorted(groups.items()):
        batches = sorted({b for s in shapes for t in tp_set for b in batches_at[(s, t)]})
        info = rec["candidates"][label]
        tpl = info.get("template") or {}
        if not tpl.get("family"):
            raise SystemExit(f"pick_winner: {label} ({info['id']}) has no template family in the bench JSON: "
                             "only family renders can be proposed")
        scope: dict = {"batch": [batches[0], batches[-1]], "shapes": shapes}
        if list(tp_set) != all_tps:
            scope = {"tp": list(tp_set), **scope}
        entries.append({"op": op, "family": tpl["family"],
                        "label": f"{info['id'][:6]}_cover_tp{'_'.join(map(str, tp_set))}",
                        "params": dict(tpl.get("params") or {}), "scope": scope})
    return entries


@functools.lru_cache(maxsize=None)
def family_of(op: str, family: str) -> Any:
    """The op's kernel family `family` (prompts/kernels/OP/FAMILY.py.j2), loaded once a run."""
    from harness.agent.families import load_family

    return load_family(ROOT / "prompts/kernels" / op / f"{family}.py.j2", op)


def outside_space(rec: dict, op: str) -> dict[str, str]:
    """The bench's family renders whose params lie outside their family's declared space
    (render_variant.py --outside-space studies), by label, each with its family: such a candidate
    cannot become a human candidate until the space is widened, so propose leaves it out."""
    out: dict[str, str] = {}
    for label, info in rec["candidates"].items():
        tpl = info.get("template") or {}
        family = tpl.get("family")
        if family and not family_of(op, family).feasible(tpl.get("params") or {}):
            out[label] = family
    return out


def write_entries(path: Path, entries: list[dict]) -> list[str]:
    """Append `entries` to a human_candidates.json at `path` and return the labels added. Each must
    render (its params in the family's declared space, its scope narrowing the family's: the
    checks render_human.py makes), and a label already there must hold the same entry (then it is
    skipped); nothing is written unless every entry passes."""
    from harness.agent.families import point_scope

    doc = json.loads(path.read_text())
    have = {(c["op"], c["label"]): c for c in doc["candidates"]}
    added = []
    for e in entries:
        fam = family_of(e["op"], e["family"])
        if not fam.feasible(e["params"]):
            raise SystemExit(f"pick_winner: {e['label']}: its params are outside {e['family']}.space.json "
                             "(a render_variant.py --outside-space study): widen the space first")
        try:
            point_scope(fam.scope, e)
        except ValueError as exc:
            raise SystemExit(f"pick_winner: {exc}") from None
        old = have.get((e["op"], e["label"]))
        if old is not None:
            if old != e:
                raise SystemExit(f"pick_winner: {path} already holds a different {e['op']} {e['label']}")
            continue
        added.append(e["label"])
    doc["candidates"].extend(e for e in entries if e["label"] in added)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return added


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
    ap.add_argument("--propose", action="store_true", help="with --per-shape: print the human-candidate "
                    "entries (JSON) that give each won (shape, TP) its best candidate")
    ap.add_argument("--exclude-shapes", default="", help="comma list of shapes --propose leaves out, "
                    "each 'shape' (every TP) or 'shape@tp'")
    ap.add_argument("--write", type=Path, default=None, help="with --propose: also append the entries to this "
                    "human_candidates.json (checked against each family's space and scope first)")
    a = ap.parse_args()
    with open(a.bench_json) as f:
        rec = json.load(f)["ops"][a.op]
    if a.propose and not a.per_shape:
        raise SystemExit("pick_winner: --propose goes with --per-shape")
    if a.write is not None and not a.propose:
        raise SystemExit("pick_winner: --write goes with --propose")
    if a.per_shape:
        speedups = shape_speedups(rec, a.incumbent)
        lines, wins = per_shape(rec, a.incumbent, a.shape_min, speedups)
        tps = sorted({int(row.get("tp", 0)) for row in rec["rows"]})
        report = "\n".join(lines + [""] + (scope_lines(rec, wins, tps) or ["no candidate wins any shape"]))
        if not a.propose:
            print(report)
            return
        print(report, file=sys.stderr)             # stdout carries the JSON alone
        excl = tuple(s for s in a.exclude_shapes.split(",") if s)
        studies = outside_space(rec, a.op)
        for label, family in sorted(studies.items()):
            won = ", ".join(f"{s}@{'/'.join(map(str, t))}" for s, t in wins.get(label, {}).items())
            print(f"{label} ({rec['candidates'][label]['id']}): outside {family}.space.json, not proposed"
                  + (f" (it wins {won}: widen the space to propose it)" if won else ""), file=sys.stderr)
        entries = propose(rec, a.op, a.incumbent, a.shape_min, excl, speedups, frozenset(studies))
        print(json.dumps(entries, indent=1))
        if a.write is not None:
            added = write_entries(a.write, entries)
            print(f"{a.write}: added {', '.join(added) or 'nothing (every entry was there)'}", file=sys.stderr)
        return
    winner, lines = pick(rec, a.incumbent, a.min_geomean, a.max_slower, a.scope_points)
    print("\n".join(lines), file=sys.stderr)
    if winner:
        print(winner)


if __name__ == "__main__":
    main()
