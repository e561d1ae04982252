"""The points a candidate's declared scope covers: what every GPU gate must visit.

Batch: every sweep batch {1,2,4,8,16,32,64} inside the scope's range plus its two ends
(minimal and maximal batch); TP: each declared degree; routing profiles for MoE ops;
context lengths for attention; declared state dtypes and named shapes.
"""
from __future__ import annotations

from harness.opdef import SWEEP_BATCHES, SWEEP_CONTEXTS, OpDefinition, Point, RoutingProfile


def scope_batches(lo: int, hi: int) -> list[int]:
    return sorted({b for b in SWEEP_BATCHES if lo <= b <= hi} | {lo, hi})


def scope_points(defn: OpDefinition, scope) -> list[Point]:
    """Every point in `scope` (a toolchain Scope or registry KernelScope)."""
    routings = list(RoutingProfile) if defn.uses_routing else [RoutingProfile.UNIFORM]
    contexts = list(SWEEP_CONTEXTS) if defn.uses_context else [0]
    states = [s for s in (scope.state_dtypes or defn.state_dtypes[:1]) if s in defn.state_dtypes]
    shapes = list(scope.shapes) or [""]
    pts = []
    for tp in scope.tp:
        for b in scope_batches(*scope.batch):
            for r in routings:
                for c in contexts:
                    for s in states:
                        for sh in shapes:
                            pts.append(Point(batch=b, tp=tp, context=c, routing=r, state_dtype=s, shape=sh))
    return pts


def key(p: Point) -> str:
    """A stable, complete label of a point (Point.label() omits routing and state dtype)."""
    return f"B={p.batch} TP{p.tp} L={p.context} {p.routing.value} state={p.state_dtype} shape={p.shape or '-'}"
