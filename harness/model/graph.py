"""CUDA-graph capture of one decode step (fixed batch, fixed cache buffers).

The step reads the token buffer and the cache (lens, KV rows, KDA state) through fixed
addresses, so one capture replays for every later token: a replay copies the new tokens
into the static buffer and relaunches every kernel of the step with no CPU work per op.
Capture fails (raises) when an op on the path synchronises with the host (e.g. a reference
that reads a length with .item()/.tolist()); callers report that as a finding.
"""
from __future__ import annotations

import torch

from .cache import DecodeCache
from .decoder import K3Decoder


class GraphedStep:
    def __init__(self, model: K3Decoder, cache: DecodeCache, warmup: int = 2) -> None:
        if model.device.type != "cuda":
            raise RuntimeError("CUDA-graph capture needs the model on a CUDA device")
        self.model, self.cache = model, cache
        self.tokens = torch.zeros(cache.batch, dtype=torch.long, device=model.device)
        saved = cache.clone()                               # warm-up steps write the cache
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                       # warm-up: allocator + lazy inits
            for _ in range(warmup):
                model.step(self.tokens, cache)
                cache.copy_from(saved)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = model.step(self.tokens, cache)
        cache.copy_from(saved)                               # capture runs nothing, but be exact

    def __call__(self, tokens: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        if cache is not self.cache:
            raise ValueError("a graphed step replays on the cache it was captured with")
        self.tokens.copy_(tokens)
        self.graph.replay()
        return self.logits
