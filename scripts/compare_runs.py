"""Do two bench_kernels.py runs agree? For each op and timing column both runs hold, the ratio
new / old of the median time at every point both measured (same TP, batch, shape, state dtype),
summarised as median (min-max); the floor too, which moves only with the measured bandwidth.

    python scripts/compare_runs.py results/h200/session30/bench_gemm30.json.xz \
        results/h200/session32/bench_gemm32.json.xz [--json]

A kernel that reproduces reads ~1.00; columns are compared by name, so a candidate is matched
only against itself (its column is "family:id").
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.scorecard import is_bench_run, load_result  # noqa: E402

PointKey = tuple[int, int, str, str]


@dataclass(frozen=True)
class Ratio:
    op: str
    column: str
    points: int
    median: float
    low: float
    high: float


def load_run(path: Path) -> dict[str, Any]:
    """A bench_kernels.py JSON, plain or .xz; ValueError (one line) if it is none."""
    data = load_result(path)
    if data is None or not is_bench_run(data):
        raise ValueError(f"{path} is no bench_kernels.py run (unreadable, or a JSON without 'ops')")
    return data


def _rows(run: dict[str, Any], op: str) -> dict[PointKey, dict[str, Any]]:
    return {(int(r["tp"]), int(r["batch"]), str(r.get("shape", "")), str(r.get("state_dtype", ""))): r
            for r in run["ops"][op].get("rows", [])}


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[Ratio]:
    out: list[Ratio] = []
    for op in new["ops"]:
        if op not in old["ops"]:
            continue
        before = _rows(old, op)
        ratios: dict[str, list[float]] = {}
        for k, row in _rows(new, op).items():
            prev = before.get(k)
            if prev is None:
                continue
            for col, t in row.get("times", {}).items():
                p = prev.get("times", {}).get(col)
                if isinstance(t, dict) and isinstance(p, dict) and t.get("median_us") and p.get("median_us"):
                    ratios.setdefault(col, []).append(t["median_us"] / p["median_us"])
            if row.get("floor_us") and prev.get("floor_us"):
                ratios.setdefault("floor", []).append(row["floor_us"] / prev["floor_us"])
        out += [Ratio(op, col, len(v), statistics.median(v), min(v), max(v)) for col, v in ratios.items()]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--json", action="store_true", help="print the ratios as JSON")
    a = ap.parse_args(argv)
    try:
        old, new = load_run(a.old), load_run(a.new)
    except ValueError as exc:
        print(f"compare_runs: error: {exc}", file=sys.stderr)
        return 2
    ratios = compare(old, new)
    bw = [r.get("bandwidth_bytes_per_s") for r in (old, new)]
    if a.json:
        print(json.dumps({"bandwidth_bytes_per_s": bw, "ratios": [asdict(r) for r in ratios]}, indent=1))
        return 0
    if bw[0] and bw[1]:
        print(f"copy bandwidth {bw[0] / 1e12:.3f} -> {bw[1] / 1e12:.3f} TB/s")
    print(f"{'op':<20} {'column':<24} {'points':>6}  new/old median (min-max)")
    for r in ratios:
        print(f"{r.op:<20} {r.column:<24} {r.points:>6}  {r.median:.3f} ({r.low:.3f}-{r.high:.3f})")
    if not ratios:
        print("no point measured by both runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
