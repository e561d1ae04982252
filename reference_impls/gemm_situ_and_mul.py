"""gemm_situ_and_mul: a gate_up GEMM with the SiTU activation fused, the first half of an FFN.

    gate_up = bf16(x @ W^T)                 x [B, K] bf16, weight [2I, K] bf16 (gate rows, then up rows)
    out     = situ_and_mul(gate_up)          = b*tanh(g/b)*sigmoid(g) * bl*tanh(u/bl), b = 4, bl = 25

out [B, I] bf16. Exactly skinny_gemm followed by situ_and_mul, the two ops the decoder runs
otherwise (so the fused kernel, when the registry selects it, replaces a pair whose math is this
function, bf16 rounding of gate_up included). `Point.shape` names the GEMM: shared_gate_up (the
two shared experts, K 7168, 2I = 2*(2*3072)/TP: 1536 at TP8) or dense_gate_up (layer 1's dense
FFN, 2I = 2*33792/TP); "" = shared_gate_up. min_bytes = weight + x + out (the weight dominates:
22 MB at TP8 for shared_gate_up). flops = 2*B*K*2I + 10*B*I.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_REDUCTION_REL_NORM, io_bytes, randn
from .situ_and_mul import reference as situ_and_mul_reference
from .skinny_gemm import gemm_kn
from .skinny_gemm import reference as skinny_gemm_reference

DEFAULT_SHAPE = "shared_gate_up"
SHAPE_NAMES: tuple[str, ...] = ("shared_gate_up", "dense_gate_up")
GATE_STD, UP_STD = 3.0, 12.0        # gate across the tanh knee at |g| ~ 4, up into the 25 saturation


def shape_name(shape: str) -> str:
    """The GEMM `shape` names ("" = shared_gate_up); ValueError on a GEMM that has no gate and up."""
    name = shape or DEFAULT_SHAPE
    if name not in SHAPE_NAMES:
        raise ValueError(f"gemm_situ_and_mul: unknown shape '{shape}' (known: {', '.join(SHAPE_NAMES)})")
    return name


SHAPES: dict[int, dict[str, tuple[int, int]]] = {tp: {s: gemm_kn(s, tp) for s in SHAPE_NAMES} for tp in (8, 16)}

INPUTS = (
    TensorSpec("x", ("B", "K"), "bf16", Role.ACTIVATION, "activation rows (the FFN input)"),
    TensorSpec("weight", ("I2", "K"), "bf16", Role.WEIGHT, "gate_up weight: rows 0..I-1 gate, I..2I-1 up"),
)
OUTPUTS = (TensorSpec("out", ("B", "I"), "bf16", Role.OUTPUT, "situ(gate, up)"),)


def dims(point: Point) -> dict[str, int]:
    k, n2 = gemm_kn(shape_name(point.shape), point.tp)
    return {"B": point.batch, "K": k, "I2": n2, "I": n2 // 2}


def reference(x: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    gate_up = skinny_gemm_reference(x, weight)["out"]
    return situ_and_mul_reference(gate_up)


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    k, i = d["K"], d["I"]
    # x ~ N(0, 1): gate rows scaled to outputs of std GATE_STD, up rows to UP_STD (situ_and_mul's inputs)
    gate = randn((i, k), gen, "cpu", torch.float32, GATE_STD * k ** -0.5)
    up = randn((i, k), gen, "cpu", torch.float32, UP_STD * k ** -0.5)
    return {"x": randn((d["B"], k), gen, device),
            "weight": torch.cat([gate, up]).to(device=device, dtype=torch.bfloat16)}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 2 * d["B"] * d["K"] * d["I2"] + 10 * d["B"] * d["I"]


DEFINITION = OpDefinition(
    name="gemm_situ_and_mul",
    summary="situ_and_mul(bf16(x @ W_gate_up^T)): the gate_up GEMM with SiTU fused (shared experts, dense FFN)",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.REL_NORM, rtol=BF16_REDUCTION_REL_NORM,
                                 reason="fp32 accumulation in another order moves gate_up by one bf16 rounding "
                                        "now and then, SiTU passes that on (~1e-3); 1e-2 still catches a swapped "
                                        "gate/up half or a dropped K-slice")},
    make_inputs=make_inputs,
    reference=reference,
    notes='Point.shape: shared_gate_up or dense_gate_up ("" = shared_gate_up); the weight holds gate rows, then up rows.',
    scope_axes=("arch", "tp", "batch", "shape"),
    # where its kernel runs, the decoder calls neither of these (harness/model/decoder.py)
    extra={"shapes": SHAPES, "shape_names": SHAPE_NAMES, "default_shape": DEFAULT_SHAPE,
           "replaces": ("skinny_gemm", "situ_and_mul")},
)
