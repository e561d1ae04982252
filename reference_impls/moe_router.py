"""moe_router (noaux_tc): router GEMM with fp32 logits, sigmoid, biased top-16, renormalize.

    logits = x @ Wg^T                       fp32 accumulate, fp32 result   [B, 896]
    s      = sigmoid(logits)                unbiased scores
    ids    = topk(s + e_bias, 16)           the bias only chooses experts
    w      = gather(s, ids); w = w / sum(w) * routed_scaling_factor (1.0 on K3)

Ties in `s + e_bias` may be broken either way: ids are compared as sets, tie-aware, and
weights by id. A row that took the other of two tied experts is held to the weights of its own
set (`outputs_for_ids`): tied keys may hide different scores when the biases differ.
Replicated on every rank (same shapes at TP8 and TP16).
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import HIDDEN, N_EXPERTS, TOP_K, io_bytes, randn, routing_bias

ROUTED_SCALING_FACTOR = 1.0

INPUTS = (
    TensorSpec("x", ("B", "H"), "bf16", Role.ACTIVATION, "hidden state after the post-attention norm"),
    TensorSpec("router_weight", ("E", "H"), "bf16", Role.WEIGHT, "gate weight, nn.Linear layout"),
    TensorSpec("e_score_bias", ("E",), "fp32", Role.WEIGHT, "expert score correction bias"),
)
OUTPUTS = (
    TensorSpec("topk_weights", ("B", "K"), "fp32", Role.OUTPUT, "renormalized routing weights"),
    TensorSpec("topk_ids", ("B", "K"), "int32", Role.OUTPUT, "chosen expert ids"),
)


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "H": HIDDEN, "E": N_EXPERTS, "K": TOP_K}


def reference(x: torch.Tensor, router_weight: torch.Tensor, e_score_bias: torch.Tensor,
              routed_scaling_factor: float = ROUTED_SCALING_FACTOR) -> dict[str, torch.Tensor]:
    logits = x.float() @ router_weight.float().t()
    scores = torch.sigmoid(logits)
    ids = torch.topk(scores + e_score_bias.float(), TOP_K, dim=-1, sorted=True).indices
    return {"topk_weights": _renormalized(scores, ids, routed_scaling_factor), "topk_ids": ids.to(torch.int32)}


def _renormalized(scores: torch.Tensor, ids: torch.Tensor, routed_scaling_factor: float) -> torch.Tensor:
    """The chosen experts' unbiased scores, renormalized to sum to the scaling factor."""
    w = scores.gather(1, ids.long())
    return (w / w.sum(-1, keepdim=True) * routed_scaling_factor).float()


def outputs_for_ids(inputs: dict[str, torch.Tensor], ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The reference's weights for a given choice of experts `ids` [B, K] (in the order given):
    what a kernel that broke a near-tie the other way must return for its own set."""
    scores = torch.sigmoid(inputs["x"].float() @ inputs["router_weight"].float().t())
    return {"topk_weights": _renormalized(scores, ids.to(scores.device), ROUTED_SCALING_FACTOR)}


def selection_key(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The key top-k ranks (sigmoid(logits) + bias), for tie-aware id comparison."""
    logits = inputs["x"].float() @ inputs["router_weight"].float().t()
    return torch.sigmoid(logits) + inputs["e_score_bias"].float()


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    x = randn((d["B"], d["H"]), gen, device)
    w = randn((d["E"], d["H"]), gen, device, scale=d["H"] ** -0.5)
    bias = (routing_bias(point.routing, d["E"], gen) + randn((d["E"],), gen, "cpu", torch.float32, 0.01))
    return {"x": x, "router_weight": w, "e_score_bias": bias.to(device=device, dtype=torch.float32)}


def min_bytes(point: Point) -> int:
    d = dims(point)
    return io_bytes(INPUTS + OUTPUTS, d)


def flops(point: Point) -> int:
    d = dims(point)
    return 2 * d["B"] * d["H"] * d["E"] + 8 * d["B"] * d["E"]


DEFINITION = OpDefinition(
    name="moe_router",
    summary="router GEMM (fp32 logits) + sigmoid, bias, top-16, renormalize",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={
        "topk_weights": Tolerance(CheckKind.ALLCLOSE, rtol=1e-4, atol=1e-6,
                                  reason="fp32 logits over K=7168 in another order: ~1e-6 rel; sigmoid and renorm keep it"),
        "topk_ids": Tolerance(CheckKind.TOPK_IDS, atol=1e-6,
                              reason="exact sets, except ids whose key is within atol of the k-th key (ties)"),
    },
    make_inputs=make_inputs,
    reference=reference,
    scope_axes=("arch", "tp", "batch", "routing"),
    uses_routing=True,
    extra={"selection_key": selection_key, "outputs_for_ids": outputs_for_ids,
           "routed_scaling_factor": ROUTED_SCALING_FACTOR},
)
