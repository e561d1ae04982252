"""The template agent's search over kernel-family parameter spaces.

A halving neighbourhood search: round 1 tries each family's start point plus a seeded
spread of the space; every later round keeps the best half of what was scored (at least
one survivor, best first) and proposes untried one-step neighbours of the survivors,
best survivor's first, filling any slack with seeded random untried points. Scores are "lower is better":
measured time on a GPU, or the compile-feedback proxy without one.

Spaces up to families.ENUMERATE_MAX points are enumerated once (the random fill shuffles every
untried point); larger ones are never enumerated: their random fill draws points of the product
and keeps the feasible, untried ones (SAMPLE_TRIES draws a wanted point at most), so a family's
space may grow past what a list of its points would hold.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from .families import ENUMERATE_MAX, Family, Params, params_key

FAILED = math.inf          # a configuration that did not compile / verify
SAMPLE_TRIES = 64          # draws per wanted point from a sampled (too large to enumerate) space


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
        small = [f for f in families if f.size() <= ENUMERATE_MAX]
        self.sampled = [f for f in families if f.size() > ENUMERATE_MAX]
        self.space = [Proposal(f.name, p) for f in small for p in f.configs()]   # the enumerated part

    def proposal(self, key: str) -> Proposal | None:
        """The proposal a score key names, if it is a feasible point of one of the families."""
        fam_name, _, blob = key.partition(":")
        fam = self.families.get(fam_name)
        try:
            params = json.loads(blob)
        except json.JSONDecodeError:
            return None
        if fam is None or not isinstance(params, dict) or not fam.feasible(params):
            return None
        return Proposal(fam_name, params)

    def propose(self, k: int, scores: dict[str, float], round_no: int,
                around: tuple[Proposal, ...] = ()) -> list[Proposal]:
        """Up to k untried proposals given `scores` (key -> score; FAILED for failures).

        `around`: points already known good (the op's promoted kernel, when it is a render of
        one of these families). Before anything is scored, half the slots (rounded up) go to
        their one-step neighbours, seeded-shuffled, and the rest to the families' start points;
        the known points themselves are never proposed."""
        rng = random.Random(f"{self.seed}:{round_no}")
        tried = set(scores) | {a.key for a in around}
        picked: list[Proposal] = []
        seen: set[str] = set()

        def take(p: Proposal) -> None:
            if p.key not in tried and p.key not in seen and len(picked) < k:
                picked.append(p)
                seen.add(p.key)

        known = {key: p for key, s in scores.items() if s < FAILED and (p := self.proposal(key)) is not None}
        ranked = sorted((scores[key], key) for key in known)
        if not ranked:
            near = [Proposal(a.family, q) for a in around if a.family in self.families
                    for q in self.families[a.family].neighbours(a.params)]
            rng.shuffle(near)
            for p in near:
                if len(picked) >= math.ceil(k / 2):
                    break
                take(p)
            for f in self.families.values():
                if (s := f.start()) is not None:
                    take(Proposal(f.name, s))
        else:
            survivors = [known[key] for _, key in ranked[: max(1, math.ceil(len(ranked) / 2))]]
            for sv in survivors:                      # best survivor's neighbours first
                for q in self.families[sv.family].neighbours(sv.params):
                    take(Proposal(sv.family, q))
        rest = [p for p in self.space if p.key not in tried and p.key not in seen]
        for f in self.sampled:                        # spaces too large to list: draw untried points
            drawn: set[str] = set()
            for _ in range(SAMPLE_TRIES * max(0, k - len(picked))):
                if len(drawn) >= k - len(picked):
                    break
                if (drawn_q := f.sample(rng)) is not None:
                    p = Proposal(f.name, drawn_q)
                    if p.key not in tried and p.key not in seen and p.key not in drawn:
                        drawn.add(p.key)
                        rest.append(p)
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
