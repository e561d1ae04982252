"""Batched generation: prefill, then decode with sampling and optional JSON-schema constraint."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .cache import DecodeCache
from .decoder import K3Decoder
from .grammar import JsonConstraint, RowConstraints
from .sampling import SamplingParams, make_generator, sample

StepFn = Callable[[torch.Tensor, DecodeCache], torch.Tensor]


@dataclass
class GenerationResult:
    tokens: list[list[int]]          # generated ids per row, EOS excluded
    finished: list[bool]             # row emitted EOS within the budget
    steps: int


def generate(model: K3Decoder, prompts: list[list[int]], max_new_tokens: int, params: SamplingParams,
             constraint: JsonConstraint | RowConstraints | None = None, step_fn: StepFn | None = None,
             max_len: int | None = None) -> GenerationResult:
    """Decode `max_new_tokens` at most per row (rows of any prompt lengths share the batch).
    `step_fn` replaces `model.step` (e.g. a CUDA-graph replay); the prefill is always eager."""
    bsz = len(prompts)
    eos = model.cfg.eos_id
    cache = DecodeCache.allocate(model.cfg, bsz, max_len or max(len(p) for p in prompts) + max_new_tokens + 1,
                                 model.device)
    logits = model.prefill(prompts, cache)
    gen = make_generator(params, model.device)
    matchers: list[Any] = constraint.matchers(bsz) if constraint else []
    out: list[list[int]] = [[] for _ in range(bsz)]
    done = [False] * bsz
    step = step_fn or model.step
    n = 0
    for n in range(1, max_new_tokens + 1):
        allowed = constraint.allowed_mask(matchers).to(logits.device) if constraint else None
        tok = sample(logits, params, gen, allowed)
        toks = tok.tolist()
        if constraint:
            constraint.advance(matchers, toks)
        for b, t in enumerate(toks):
            if done[b]:
                continue
            if t == eos:
                done[b] = True
            else:
                out[b].append(t)
        if all(done) or n == max_new_tokens:
            break
        logits = step(tok, cache)
    return GenerationResult(out, done, n)
