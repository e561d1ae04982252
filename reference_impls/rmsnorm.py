"""rmsnorm: out = x / sqrt(mean(x^2) + eps) * w over the last dim, eps = 1e-5, fp32 compute.

    x [B, N] bf16, weight [N] bf16 -> out [B, N] bf16        N = 7168 (hidden)

The q_a / kv_a norms of MLA (N = 1536, 512) and the latent norm (3584) are the same math
at other widths; the catalogue point is the hidden-size norm. Replicated (same at TP8/16).
min_bytes = x + weight + out; the doc's table lists the norm fused into attn_res.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_ELEMENTWISE_ATOL, BF16_ELEMENTWISE_RTOL, HIDDEN, io_bytes, randn, rms

INPUTS = (
    TensorSpec("x", ("B", "N"), "bf16", Role.ACTIVATION, "hidden state"),
    TensorSpec("weight", ("N",), "bf16", Role.WEIGHT, "RMSNorm weight"),
)
OUTPUTS = (TensorSpec("out", ("B", "N"), "bf16", Role.OUTPUT, "rms(x) * weight"),)


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "N": HIDDEN}


def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """fp32 rms(x) * w, not rounded."""
    return rms(x) * weight.float()


def reference(x: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"out": rmsnorm(x, weight).to(torch.bfloat16)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    x = randn((d["B"], d["N"]), gen, device, scale=3.0)
    w = (1.0 + randn((d["N"],), gen, "cpu", torch.float32, 0.1)).to(device=device, dtype=torch.bfloat16)
    return {"x": x, "weight": w}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 4 * d["B"] * d["N"]          # square, sum, scale, weight


DEFINITION = OpDefinition(
    name="rmsnorm",
    summary="RMSNorm over the hidden size (eps 1e-5), fp32 compute",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                                 reason="one bf16 ulp of the fp32 result")},
    make_inputs=make_inputs,
    reference=reference,
)
