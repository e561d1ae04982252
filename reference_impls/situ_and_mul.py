"""situ_and_mul: the shared experts' activation, fp32 compute.

    gate, up = gate_up[:, :I], gate_up[:, I:]
    out      = situ(gate, up) = b*tanh(gate/b)*sigmoid(gate) * bl*tanh(up/bl),  b = 4, bl = 25

gate_up [B, 2I] bf16 -> out [B, I] bf16, I = 2*3072/TP (768 at TP8, 384 at TP16: the two
shared experts fused, sharded by TP). Reading chosen: gate is the first half (the
gate_up_proj row order of the serving code). min_bytes = gate_up + out.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_ELEMENTWISE_ATOL, BF16_ELEMENTWISE_RTOL, SHARED_INTER, io_bytes, randn, situ

INPUTS = (TensorSpec("gate_up", ("B", "I2"), "bf16", Role.ACTIVATION, "[gate | up] from the gate_up GEMM"),)
OUTPUTS = (TensorSpec("out", ("B", "I"), "bf16", Role.OUTPUT, "situ(gate, up)"),)


def dims(point: Point) -> dict[str, int]:
    i = SHARED_INTER // point.tp
    return {"B": point.batch, "I": i, "I2": 2 * i}


def reference(gate_up: torch.Tensor) -> dict[str, torch.Tensor]:
    gate, up = gate_up.float().chunk(2, dim=-1)
    return {"out": situ(gate, up).to(torch.bfloat16)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    # gate spans the tanh knee at |g| ~ b = 4; up reaches the bl = 25 saturation in the tails
    gate = randn((d["B"], d["I"]), gen, "cpu", torch.float32, 3.0)
    up = randn((d["B"], d["I"]), gen, "cpu", torch.float32, 12.0)
    return {"gate_up": torch.cat([gate, up], dim=-1).to(device=device, dtype=torch.bfloat16)}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 10 * d["B"] * d["I"]     # two tanh, one sigmoid, four multiplies, counted as ~10


DEFINITION = OpDefinition(
    name="situ_and_mul",
    summary="SiTU(gate, up) = 4 tanh(g/4) sigmoid(g) * 25 tanh(u/25), shared-expert width",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                                 reason="one bf16 ulp; fast tanh/exp approximations stay well inside")},
    make_inputs=make_inputs,
    reference=reference,
    notes='gate is the first half of gate_up.',
)
