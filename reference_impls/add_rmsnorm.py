"""add_rmsnorm (K2-style fused residual add + RMSNorm), fp32 compute:

    r            = bf16(x + residual)        the residual stream is stored in bf16
    out          = rms(r) * w                rms over the hidden dim, eps = 1e-5
    residual_out = r

x, residual [B, 7168] bf16, weight [7168] bf16 -> out, residual_out [B, 7168] bf16.

Reading chosen: the norm reads the bf16-rounded sum (as vLLM's fused_add_rms_norm does,
adding in the activation dtype), not the fp32 sum. K3 replaces this with attn_res; K2-style
models use it. min_bytes = x + residual + weight + out + residual_out.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_ELEMENTWISE_ATOL, BF16_ELEMENTWISE_RTOL, HIDDEN, io_bytes, randn, rms, round_bf16

INPUTS = (
    TensorSpec("x", ("B", "H"), "bf16", Role.ACTIVATION, "sublayer output"),
    TensorSpec("residual", ("B", "H"), "bf16", Role.ACTIVATION, "residual stream"),
    TensorSpec("weight", ("H",), "bf16", Role.WEIGHT, "RMSNorm weight"),
)
OUTPUTS = (
    TensorSpec("out", ("B", "H"), "bf16", Role.OUTPUT, "rms(x + residual) * weight"),
    TensorSpec("residual_out", ("B", "H"), "bf16", Role.OUTPUT, "bf16(x + residual)"),
)


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "H": HIDDEN}


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    r = round_bf16(x.float() + residual.float())
    out = rms(r) * weight.float()
    return {"out": out.to(torch.bfloat16), "residual_out": r.to(torch.bfloat16)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    x = randn((d["B"], d["H"]), gen, device)
    res = randn((d["B"], d["H"]), gen, device, scale=4.0)
    w = (1.0 + randn((d["H"],), gen, "cpu", torch.float32, 0.1)).to(device=device, dtype=torch.bfloat16)
    return {"x": x, "residual": res, "weight": w}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 5 * d["B"] * d["H"]


DEFINITION = OpDefinition(
    name="add_rmsnorm",
    summary="K2-style fused residual add + RMSNorm (eps 1e-5)",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={
        "out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                         reason="one bf16 ulp of the fp32 result"),
        "residual_out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                                  reason="the sum of two bf16 rounded once; one ulp for another rounding path"),
    },
    make_inputs=make_inputs,
    reference=reference,
    notes='the norm reads the bf16-rounded sum r (vLLM fused_add_rms_norm).',
)
