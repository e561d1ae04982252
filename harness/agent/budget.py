"""Budgets on tokens, cost and wall time. Exhausting one ends the run cleanly: the
round in progress finishes what it has, no new LLM request is started."""
from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass, field

# USD per million tokens (input, output), list prices; matched by model-name prefix,
# longest prefix first. A model not listed has unknown cost: the cost budget then
# cannot be enforced and the run says so.
PRICES_USD_PER_MTOK: dict[str, tuple[float, float]] = {
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5": (1.25, 10.00),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-haiku-4": (1.00, 5.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-opus-4": (15.00, 75.00),
}


def price_of(model: str) -> tuple[float, float] | None:
    for prefix in sorted(PRICES_USD_PER_MTOK, key=len, reverse=True):
        if model.startswith(prefix):
            return PRICES_USD_PER_MTOK[prefix]
    return None


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> float | None:
    p = price_of(model)
    if p is None:
        return None
    return (input_tokens * p[0] + output_tokens * p[1]) / 1e6


class StopReason(str, enum.Enum):
    TOKENS = "token budget spent"
    COST = "cost budget spent"
    TIME = "time limit reached"


@dataclass
class Budget:
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    time_limit_s: float | None = None
    started_monotonic: float = field(default_factory=time.monotonic)
    tokens: int = 0
    cost: float = 0.0
    cost_unknown: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, input_tokens: int, output_tokens: int, usd: float | None) -> None:
        with self._lock:
            self.tokens += input_tokens + output_tokens
            if usd is None:
                self.cost_unknown = True
            else:
                self.cost += usd

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_monotonic

    def remaining_s(self) -> float | None:
        return None if self.time_limit_s is None else self.time_limit_s - self.elapsed_s()

    def time_up(self) -> bool:
        """The time limit alone has passed (GPU work costs time, not tokens)."""
        rem = self.remaining_s()
        return rem is not None and rem <= 0

    def exhausted(self) -> StopReason | None:
        with self._lock:
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return StopReason.TOKENS
            if self.max_cost_usd is not None and self.cost >= self.max_cost_usd:
                return StopReason.COST
        if self.time_up():
            return StopReason.TIME
        return None
