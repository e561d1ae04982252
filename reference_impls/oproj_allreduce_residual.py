"""oproj_allreduce_residual: attention output projection, all-reduce over TP ranks, residual add.

    partial_r = x_r @ W_o,r^T                   fp32, per rank r   [B, 7168]
    out       = bf16(residual + sum_r partial_r)                   (fp32 sum, one rounding)

x [B, h*128] bf16 (h = 96/TP local heads), w_o [7168, h*128] bf16 (this rank's column
slice of o_proj), residual [B, 7168] bf16 -> out [B, 7168] bf16.

The catalogue op is the 1-rank form (what one GPU computes and measures: the all-reduce
is the identity). `reference_ranks` gives the N-rank semantics from per-rank lists;
`reference_distributed` runs the same on an initialised torch.distributed process group
(all_reduce of the fp32 partials). Reading chosen: partials are summed in fp32; a kernel
that all-reduces bf16 partials adds ~N bf16 roundings, inside the REL_NORM tolerance.
min_bytes = w_o + x + residual + out: 22.1 MB at TP8 B=1 (the doc's 22), 24.1 MB at B=64
(the doc's 23 leaves out the residual read).
"""
from __future__ import annotations

from typing import Sequence

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_REDUCTION_REL_NORM, HEAD_DIM, HIDDEN, heads, io_bytes, randn

INPUTS = (
    TensorSpec("x", ("B", "D"), "bf16", Role.ACTIVATION, "attention output of the local heads"),
    TensorSpec("w_o", ("H", "D"), "bf16", Role.WEIGHT, "o_proj columns of this rank"),
    TensorSpec("residual", ("B", "H"), "bf16", Role.ACTIVATION, "residual stream"),
)
OUTPUTS = (TensorSpec("out", ("B", "H"), "bf16", Role.OUTPUT, "residual + all_reduce(x @ w_o^T)"),)


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "D": heads(point) * HEAD_DIM, "H": HIDDEN}


def reference_ranks(xs: Sequence[torch.Tensor], w_os: Sequence[torch.Tensor], residual: torch.Tensor) -> torch.Tensor:
    """N-rank semantics from per-rank inputs: bf16(residual + sum_r x_r @ w_o,r^T)."""
    if len(xs) != len(w_os) or not xs:
        raise ValueError(f"need one weight per rank ({len(xs)} activations, {len(w_os)} weights)")
    total = torch.zeros(residual.shape, dtype=torch.float32, device=residual.device)
    for x, w in zip(xs, w_os):
        total += x.float() @ w.float().t()
    return (residual.float() + total).to(torch.bfloat16)


def reference_distributed(x: torch.Tensor, w_o: torch.Tensor, residual: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's share through torch.distributed: all_reduce(SUM) of the fp32 partial,
    then the residual add. Needs an initialised process group."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call init_process_group first")
    partial = x.float() @ w_o.float().t()
    dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=group)
    return (residual.float() + partial).to(torch.bfloat16)


def reference(x: torch.Tensor, w_o: torch.Tensor, residual: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"out": reference_ranks([x], [w_o], residual)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    return {"x": randn((d["B"], d["D"]), gen, device),
            # full o_proj has fan-in 96*128; one rank holds 1/TP of it
            "w_o": randn((d["H"], d["D"]), gen, device, scale=(96 * HEAD_DIM) ** -0.5),
            "residual": randn((d["B"], d["H"]), gen, device, scale=2.0)}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 2 * d["B"] * d["D"] * d["H"] + d["B"] * d["H"]


DEFINITION = OpDefinition(
    name="oproj_allreduce_residual",
    summary="o_proj GEMM + all-reduce over TP + residual add (1-rank form per GPU)",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.REL_NORM, rtol=BF16_REDUCTION_REL_NORM,
                                 reason="fp32 GEMM accumulation in any order, bf16 partials in the all-reduce "
                                        "and one output rounding stay near 3e-3")},
    make_inputs=make_inputs,
    reference=reference,
    notes='1-rank form; reference_ranks (N ranks) and reference_distributed (torch.distributed) give the all-reduce semantics; partials summed in fp32.',
    extra={"reference_ranks": reference_ranks, "reference_distributed": reference_distributed},
)
