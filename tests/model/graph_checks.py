"""Shared GPU check of the decode step under CUDA-graph capture: a plain module with a unique
name (not `conftest`, which names another folder's module when several folders are collected)."""
from __future__ import annotations

import torch


def assert_graph_step_matches_eager(model, cfg, steps: int):
    """On the GPU: `steps` greedy decode steps of `model` eager and through a captured CUDA
    graph (GraphedStep) give bit-identical logits; returns the two caches (eager, graphed)."""
    from harness.model import DecodeCache
    from harness.model.graph import GraphedStep

    prompts = [[257, 1, 2, 3], [257, 4]]
    caches = [DecodeCache.allocate(cfg, 2, 16, "cuda") for _ in range(2)]
    logits = [model.prefill(prompts, c) for c in caches]
    graphed = GraphedStep(model, caches[1])
    for _ in range(steps):
        tok = logits[0].argmax(-1)
        logits[0] = model.step(tok, caches[0])
        logits[1] = graphed(tok, caches[1]).clone()
        torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=0)
    return caches
