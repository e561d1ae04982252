"""Sampling modes on fixed logits: greedy, temperature, top-k, top-p, seeds, masks."""
from __future__ import annotations

import torch

from harness.model.sampling import SamplingParams, filtered_logits, make_generator, sample


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(4, 50, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_argmax_and_masks_apply():
    x = _logits()
    assert torch.equal(sample(x, SamplingParams()), x.argmax(-1))
    allowed = torch.zeros_like(x, dtype=torch.bool)
    allowed[:, 7] = True
    assert sample(x, SamplingParams(temperature=1.0), make_generator(SamplingParams(), "cpu"), allowed).tolist() == [7] * 4


def test_seeded_sampling_reproduces_and_seeds_differ():
    x = _logits()
    p = SamplingParams(temperature=1.0, seed=3)
    draws = lambda p: [sample(x, p, g).tolist() for g in [make_generator(p, "cpu")] for _ in range(20)]  # noqa: E731
    assert draws(p) == draws(p)
    assert draws(p) != draws(SamplingParams(temperature=1.0, seed=4))


def test_top_k_and_top_p_restrict_support():
    x = _logits(1)
    p = SamplingParams(temperature=2.0, top_k=3, seed=0)
    g = make_generator(p, "cpu")
    top3 = torch.topk(x, 3, dim=-1).indices
    for _ in range(50):
        t = sample(x, p, g)
        assert all(int(t[r]) in top3[r].tolist() for r in range(4))
    # top-p: kept tokens are the smallest prefix (by prob) whose mass reaches p
    f = filtered_logits(x, SamplingParams(temperature=1.0, top_p=0.5))
    probs = torch.softmax(x, -1)
    for r in range(4):
        kept = torch.isfinite(f[r])
        assert probs[r][kept].sum() >= 0.5
        assert probs[r][kept].sum() - probs[r][kept].min() < 0.5
    assert torch.equal(sample(x, SamplingParams(temperature=1.0, top_p=1e-6), make_generator(p, "cpu")), x.argmax(-1))


def test_temperature_sharpens():
    x = _logits(2)
    x[torch.arange(4), x.argmax(-1)] += 1.0          # a top-1 margin of >= 1 logit
    g = torch.Generator().manual_seed(0)
    cold = [sample(x, SamplingParams(temperature=0.05), g) for _ in range(30)]
    assert all(torch.equal(c, x.argmax(-1)) for c in cold)
    hot = {tuple(sample(x, SamplingParams(temperature=5.0), g).tolist()) for _ in range(30)}
    assert len(hot) > 5
