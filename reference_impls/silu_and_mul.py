"""silu_and_mul (SwiGLU, K2-style models), fp32 compute:

    gate, up = gate_up[:, :I], gate_up[:, I:]
    out      = silu(gate) * up = gate * sigmoid(gate) * up

gate_up [B, 2I] bf16 -> out [B, I] bf16, I = 2*3072/TP (768 at TP8, 384 at TP16), the
shared-expert width, so it compares one-to-one with situ_and_mul. min_bytes = gate_up + out.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_ELEMENTWISE_ATOL, BF16_ELEMENTWISE_RTOL, SHARED_INTER, io_bytes, randn

INPUTS = (TensorSpec("gate_up", ("B", "I2"), "bf16", Role.ACTIVATION, "[gate | up] from the gate_up GEMM"),)
OUTPUTS = (TensorSpec("out", ("B", "I"), "bf16", Role.OUTPUT, "silu(gate) * up"),)


def dims(point: Point) -> dict[str, int]:
    i = SHARED_INTER // point.tp
    return {"B": point.batch, "I": i, "I2": 2 * i}


def reference(gate_up: torch.Tensor) -> dict[str, torch.Tensor]:
    gate, up = gate_up.float().chunk(2, dim=-1)
    return {"out": (torch.nn.functional.silu(gate) * up).to(torch.bfloat16)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    return {"gate_up": randn((d["B"], d["I2"]), gen, device, scale=2.0)}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 5 * d["B"] * d["I"]      # exp, add, divide, two multiplies


DEFINITION = OpDefinition(
    name="silu_and_mul",
    summary="SiLU(gate) * up (SwiGLU), shared-expert width",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                                 reason="one bf16 ulp of the fp32 result")},
    make_inputs=make_inputs,
    reference=reference,
    notes='gate is the first half of gate_up.',
)
