"""The template agent's search over kernel-family parameter spaces.

A halving neighbourhood search: round 1 tries each family's start point plus a seeded
spread of the space; every later round keeps the best half of what was scored (at least
one survivor, best first) and proposes untried one-step neighbours of the survivors,
best survivor's first, filling any slack with seeded random untried points. Scores are "lower is better":
measured time on a GPU, or the compile-feedback proxy without one.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .families import Family, Params, params_key

FAILED = math.inf          # a configuration that did not compile / verify


@dataclass(frozen=True)
class Proposal:
    family: str
    params: Params

    @property
    def key(self) -> str:
        return params_key(self.family, self.params)


class HalvingSearch:
    def __init__(self, families: list[Family], seed: int = 0):
        self.families = {f.name: f for f in families}
        self.seed = seed
        self.space = [Proposal(f.name, p) for f in families for p in f.configs()]

    def propose(self, k: int, scores: dict[str, float], round_no: int) -> list[Proposal]:
        """Up to k untried proposals given `scores` (key -> score; FAILED for failures)."""
        rng = random.Random(f"{self.seed}:{round_no}")
        tried = set(scores)
        picked: list[Proposal] = []
        seen: set[str] = set()

        def take(p: Proposal) -> None:
            if p.key not in tried and p.key not in seen and len(picked) < k:
                picked.append(p)
                seen.add(p.key)

        by_key = {p.key: p for p in self.space}
        ranked = sorted((s, key) for key, s in scores.items() if s < FAILED and key in by_key)
        if not ranked:
            for f in self.families.values():
                if (s := f.start()) is not None:
                    take(Proposal(f.name, s))
        else:
            survivors = [by_key[key] for _, key in ranked[: max(1, math.ceil(len(ranked) / 2))]]
            for s in survivors:                       # best survivor's neighbours first
                for q in self.families[s.family].neighbours(s.params):
                    take(Proposal(s.family, q))
        rest = [p for p in self.space if p.key not in tried and p.key not in seen]
        rng.shuffle(rest)
        for p in rest:
            take(p)
        return picked

    def best(self, scores: dict[str, float]) -> tuple[str, float] | None:
        ok = [(s, k) for k, s in scores.items() if s < FAILED]
        return (min(ok)[1], min(ok)[0]) if ok else None


def compile_proxy(registers: list[int | None], spill_bytes: list[int | None], ld128: list[int | None]) -> float:
    """Score from compile feedback alone (no GPU): spills dominate (local memory round-trips
    through L1/L2), then register pressure (it caps occupancy: 65536 registers per SM),
    with a small credit for 128-bit global loads. A ranking heuristic, not a time."""
    regs = max((r for r in registers if r is not None), default=128)
    spills = max((s for s in spill_bytes if s is not None), default=0)
    vec = min((v for v in ld128 if v is not None), default=0)
    return 1000.0 * spills + regs - 0.5 * min(vec, 64)
