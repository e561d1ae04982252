"""Sampling from logits: greedy, temperature, top-k, top-p (nucleus), seeded.

All math in fp32 on the logits' device; `allowed` (bool [B, V]) masks tokens a grammar
forbids before anything else, so constrained decoding composes with every mode.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0        # 0 = greedy
    top_k: int = 0                  # 0 = off
    top_p: float = 1.0              # 1 = off
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def make_generator(params: SamplingParams, device: torch.device | str) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(params.seed)


def filtered_logits(logits: torch.Tensor, params: SamplingParams,
                    allowed: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [B, V]: masked, temperature-scaled, top-k and top-p filtered (-inf = excluded)."""
    x = logits.float().clone()
    if allowed is not None:
        x = x.masked_fill(~allowed.to(x.device), float("-inf"))
    if params.greedy:
        return x
    x = x / params.temperature
    if params.top_k > 0 and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (keeps >= 1 token)
        before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


def sample(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None = None,
           allowed: torch.Tensor | None = None) -> torch.Tensor:
    """int64 [B] next tokens."""
    x = filtered_logits(logits, params, allowed)
    if params.greedy:
        return x.argmax(dim=-1)
    probs = torch.softmax(x, dim=-1)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)
