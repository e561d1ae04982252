"""Where a draft wins when it does not win everywhere: the narrow scope to gate it on.

The perf gate needs a geomean of `geomean_margin` (5%) over a candidate's whole scope, timed
against whatever runs each point today. A draft that clears the bar at some named shapes, state
dtypes or a batch range, and loses it over the rest, can still be promoted there, beside the op's
broad kernel (harness/registry.py runs the most specific promoted kernel covering a call). This
module reads a draft's search timings against the promoted kernel and names that sub-scope, with
the `harness narrow` command that writes it. The search times a few batches per point (1, 8, 64),
so a batch range ends at the last batch measured to win. The hint is not a verdict: the perf gate
times every point of the narrowed scope.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

MIN_POINT_SPEEDUP = 1.0      # a hinted sub-scope holds no point where the draft lost to the promoted kernel


@dataclass(frozen=True)
class NarrowHint:
    """A sub-scope of the draft's where every search point won and their geomean clears the margin."""

    shapes: tuple[str, ...] = ()            # () = every shape the draft was timed at
    state_dtypes: tuple[str, ...] = ()      # () = every state dtype
    batch: tuple[int, int] | None = None    # None = the draft's whole batch range
    points: int = 0                         # search points inside it
    geomean: float = 0.0                    # their promoted time / the draft's time

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
    the promoted kernel and whose geomean reaches `margin`. None when the promoted kernel was not
    timed at every point, when the whole draft already does (the perf gate also fails a point that
    regresses, so a geomean over the margin with a losing point still wants narrowing), or when
    no sub-scope does. `timings`: records.Timing (batch, shape, state_dtype, kernel_us, incumbent_us)."""
    if not timings or not all(t.incumbent_us and t.kernel_us for t in timings):
        return None
    speed = [(t, t.incumbent_us / t.kernel_us) for t in timings]

    def ok(sel: list[float]) -> bool:
        return bool(sel) and min(sel) >= MIN_POINT_SPEEDUP and _geomean(sel) >= margin
    if ok([s for _, s in speed]):
        return None

    options: list[NarrowHint] = []
    for attr, key in (("shape", "shapes"), ("state_dtype", "state_dtypes")):
        values = sorted({getattr(t, attr) for t, _ in speed})
        if len(values) < 2:
            continue
        winners = [v for v in values if ok([s for t, s in speed if getattr(t, attr) == v])]
        sel = [s for t, s in speed if getattr(t, attr) in winners]
        if winners and ok(sel):
            options.append(NarrowHint(**{key: tuple(winners)}, points=len(sel), geomean=_geomean(sel)))
    batches = sorted({t.batch for t, _ in speed})
    lo, hi = batch_range
    for b in batches[:-1]:                              # a prefix: the scope's low end up to b
        sel = [s for t, s in speed if t.batch <= b]
        if ok(sel):
            options.append(NarrowHint(batch=(lo, b), points=len(sel), geomean=_geomean(sel)))
    for b in batches[1:]:                               # a suffix: from b up to the scope's high end
        sel = [s for t, s in speed if t.batch >= b]
        if ok(sel):
            options.append(NarrowHint(batch=(b, hi), points=len(sel), geomean=_geomean(sel)))
    return max(options, key=lambda h: (h.points, h.geomean), default=None)
