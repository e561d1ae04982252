"""The benign-perturbation path of numerics_model: the model's own noise floor.

A third decoder runs the op through a *legitimate* variant of its reference: the same
math with another fp32 summation order (what any correct kernel does). Its drift from the
reference path, measured in the same lockstep run, is the noise floor the kernel's drift
is judged against: a near-tie flipped by rounding (one expert of 896, one sampled token)
changes a hidden state that KDA states and MLA caches carry for the rest of the run, so
a correct kernel and a benign reordering drift alike; a wrong kernel drifts more.

moe_router: logits = sum over SPLITS K-chunks of x[:, c] @ Wg[:, c]^T, each chunk an fp32
GEMM and the partials summed in chunk order (the split-K structure of a tensor-core router;
products of bf16 inputs are exact in fp32, so only the order of the sums differs).
Other ops: the reference output, every floating element moved by one unit in the last
place of its dtype in a seeded random direction (half the elements): a kernel's own
rounding of its outputs. Both are deterministic per call index.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

SPLITS = 8             # K chunks of the router's 7168-wide dot products (896 per chunk at K3 widths)

KernelFn = Callable[..., None]


def describe(op: str) -> str:
    if op == "moe_router":
        return f"reference with split-K fp32 logits ({SPLITS} chunks summed in order)"
    return "reference with each floating output moved by +-1 ulp of its dtype (seeded, half the elements)"


def router_split_k(splits: int = SPLITS) -> KernelFn:
    """moe_router with its logits summed over `splits` K-chunks in chunk order."""
    def fn(x, router_weight, e_score_bias, topk_weights, topk_ids, **_: Any) -> None:
        import torch

        from reference_impls.moe_router import ROUTED_SCALING_FACTOR

        top_k = topk_ids.shape[-1]
        xf, wf = x.float(), router_weight.float()
        bounds = [round(i * xf.shape[1] / splits) for i in range(splits + 1)]
        logits = torch.zeros(xf.shape[0], wf.shape[0], dtype=torch.float32, device=x.device)
        for a, b in zip(bounds[:-1], bounds[1:]):
            logits = logits + xf[:, a:b] @ wf[:, a:b].t()
        scores = torch.sigmoid(logits)
        ids = torch.topk(scores + e_score_bias.float(), top_k, dim=-1, sorted=True).indices
        w = scores.gather(1, ids)
        topk_weights.copy_(w / w.sum(-1, keepdim=True) * ROUTED_SCALING_FACTOR)
        topk_ids.copy_(ids.to(torch.int32))
    return fn


def _ulp_jitter(op: str, seed: int) -> KernelFn:
    import torch

    import reference_impls
    defn = reference_impls.get(op)
    calls = [0]

    def fn(**tensors: Any) -> None:
        calls[0] += 1
        inputs = {s.name: tensors[s.name] for s in defn.inputs if s.name in tensors}
        ref = defn.run_reference(inputs)
        g = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + calls[0])
        for name, val in ref.items():
            if val.is_floating_point():
                r = torch.rand(val.shape, generator=g).to(val.device)
                toward = torch.where(r < 0.25, torch.full_like(val, float("-inf")), torch.full_like(val, float("inf")))
                moved = torch.nextafter(val, toward)
                val = torch.where((r < 0.25) | (r >= 0.75), moved, val)
            tensors[name].copy_(val)                     # outputs, and STATE buffers in place
    return fn


def benign_fn(op: str, seed: int = 0) -> KernelFn:
    """A registry kernel fn(**inputs, **outputs) computing `op` with a benign perturbation."""
    if op == "moe_router":
        return router_split_k(SPLITS)
    return _ulp_jitter(op, seed)


def set_difference_counts(a: Mapping[str, list], b: Mapping[str, list]) -> int:
    """Rows whose recorded id sets differ between two paths, summed over call sites."""
    return sum(x != y for site in a.keys() & b.keys() for x, y in zip(a[site], b[site]))
