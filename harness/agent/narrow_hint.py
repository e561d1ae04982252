"""Where a draft wins when it does not win everywhere: the narrow scope to gate it on.

The perf gate needs a geomean of `geomean_margin` (5%) over a candidate's whole scope, timed
against whatever runs each point today. A draft that clears the bar at some named shapes, state
dtypes or a batch range (or some shapes at a batch range), and loses it over the rest, can still
be promoted there, beside the op's other kernels (harness/registry.py runs the most specific
promoted kernel covering a call). This module reads a draft's search timings against what runs
each point today (the promoted kernel covering it, else the reference) and names that sub-scope,
with the `harness narrow` command that writes it. The search times a few batches per point (1, 8, 64),
so a batch range ends at the last batch measured to win. The hint is not a verdict: the perf gate
times every point of the narrowed scope.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

MIN_POINT_SPEEDUP = 1.0      # a hinted sub-scope holds no point where the draft lost to today's path


@dataclass(frozen=True)
class NarrowHint:
    """A sub-scope of the draft's where every search point won and their geomean clears the margin."""

    shapes: tuple[str, ...] = ()            # () = every shape the draft was timed at
    state_dtypes: tuple[str, ...] = ()      # () = every state dtype
    batch: tuple[int, int] | None = None    # None = the draft's whole batch range
    points: int = 0                         # search points inside it
    geomean: float = 0.0                    # their today's time / the draft's time

    def command(self, op: str, candidate: str) -> str:
        parts = [f"harness narrow {op} {candidate}"]
        if self.shapes:
            parts.append(f"--shapes {','.join(self.shapes)}")
        if self.state_dtypes:
            parts.append(f"--state-dtypes {','.join(self.state_dtypes)}")
        if self.batch is not None:
            parts.append(f"--batch {self.batch[0]}-{self.batch[1]}")
        return " ".join(parts)

    def to_json(self, op: str, candidate: str) -> dict[str, Any]:
        return {"shapes": list(self.shapes), "state_dtypes": list(self.state_dtypes),
                "batch": list(self.batch) if self.batch else None, "points": self.points,
                "geomean": self.geomean, "command": self.command(op, candidate)}


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def narrow_hint(timings: Sequence[Any], batch_range: tuple[int, int], margin: float) -> NarrowHint | None:
    """The largest sub-scope (most search points; then the higher geomean) whose every point beat
    what runs it today (Timing.today_us: the promoted kernel covering it, else the reference, as
    perf_sweep compares) and whose geomean reaches `margin`. A sub-scope is a batch window (the
    scope's low end up to a measured batch, or from one up to its high end), some named shapes or
    state dtypes, or both: skinny_gemm's drafts win at some GEMM shapes and only at small B. None
    when today's time is missing at a point, when the whole draft already wins (the perf gate also
    fails a point that regresses, so a geomean over the margin with a losing point still wants
    narrowing), or when no sub-scope does. `timings`: records.Timing."""
    if not timings or not all(t.today_us and t.kernel_us for t in timings):
        return None
    speed = [(t, t.today_us / t.kernel_us) for t in timings]

    def ok(sel: list[float]) -> bool:
        return bool(sel) and min(sel) >= MIN_POINT_SPEEDUP and _geomean(sel) >= margin
    if ok([s for _, s in speed]):
        return None

    lo, hi = batch_range
    batches = sorted({t.batch for t, _ in speed})
    windows: list[tuple[int, int] | None] = [None]                  # None: the whole batch range
    windows += [(lo, b) for b in batches[:-1]] + [(b, hi) for b in batches[1:]]
    options: list[NarrowHint] = []
    for win in windows:
        inside = [(t, s) for t, s in speed if win is None or win[0] <= t.batch <= win[1]]
        if win is not None and ok([s for _, s in inside]):
            options.append(NarrowHint(batch=win, points=len(inside), geomean=_geomean([s for _, s in inside])))
        for attr, key in (("shape", "shapes"), ("state_dtype", "state_dtypes")):
            values = sorted({getattr(t, attr) for t, _ in inside})
            winners = [v for v in values if ok([s for t, s in inside if getattr(t, attr) == v])]
            sel = [s for t, s in inside if getattr(t, attr) in winners]
            if 0 < len(winners) < len(values) and ok(sel):
                options.append(NarrowHint(**{key: tuple(winners)}, batch=win, points=len(sel), geomean=_geomean(sel)))
    return max(options, key=lambda h: (h.points, h.geomean), default=None)
