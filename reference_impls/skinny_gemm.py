"""skinny_gemm: out = x @ W^T, bf16 in, fp32 accumulate, bf16 out (nn.Linear layout).

    x [B, K] bf16, weight [N, K] bf16 -> out [B, N] bf16

`Point.shape` names one of every per-rank bf16 GEMM of a K3 decode step (SHAPES below;
"" = latent_down). K and N per TP come from the doc's table (h = 96/TP heads):

  kda_in_proj     7168 -> 4*h*128 + 128 + h, rows padded to a multiple of 16 (6288 / 3216)
                  (q, k, v, g_out of the local heads + f_a (128, every rank) + beta logits)
  kda_f_b         128 -> h*128            f = f_a @ W_fb^T, the per-channel gate input
  kda_o_proj      h*128 -> 7168           (the all-reduce is oproj_allreduce_residual's)
  mla_qkv_a       7168 -> 1536+512+64     replicated
  mla_q_b         1536 -> h*192           q_nope 128 + q_pe 64 per head
  mla_g_proj      7168 -> h*128           sigmoid output gate
  mla_o_proj      h*128 -> 7168
  latent_down     7168 -> 3584            replicated
  shared_gate_up  7168 -> 2*(2*3072)/TP   two shared experts fused, gate|up
  shared_down     (2*3072)/TP -> 7168
  latent_up       3584 -> 7168            replicated
  dense_gate_up   7168 -> 2*33792/TP      layer 1's dense FFN
  dense_down      33792/TP -> 7168

min_bytes = weight + x + out; the weight dominates and matches the doc's bytes column
(e.g. kda_in_proj 90 MB at TP8 B=1, latent_down 51 MB). flops = 2*B*K*N.
"""
from __future__ import annotations

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_REDUCTION_REL_NORM, HEAD_DIM, HIDDEN, LATENT, SHARED_INTER, io_bytes, randn

DEFAULT_SHAPE = "latent_down"
DENSE_INTER = 33792
Q_LORA, KV_LORA, QK_ROPE, QK_NOPE = 1536, 512, 64, 128


def _pad16(n: int) -> int:
    return (n + 15) // 16 * 16


def gemm_kn(shape: str, tp: int) -> tuple[int, int]:
    """(K, N) of the named per-rank GEMM at TP `tp`; ValueError on an unknown name."""
    h = 96 // tp
    table = {
        "kda_in_proj": (HIDDEN, _pad16(4 * h * HEAD_DIM + HEAD_DIM + h)),
        "kda_f_b": (HEAD_DIM, h * HEAD_DIM),
        "kda_o_proj": (h * HEAD_DIM, HIDDEN),
        "mla_qkv_a": (HIDDEN, Q_LORA + KV_LORA + QK_ROPE),
        "mla_q_b": (Q_LORA, h * (QK_NOPE + QK_ROPE)),
        "mla_g_proj": (HIDDEN, h * HEAD_DIM),
        "mla_o_proj": (h * HEAD_DIM, HIDDEN),
        "latent_down": (HIDDEN, LATENT),
        "shared_gate_up": (HIDDEN, 2 * SHARED_INTER // tp),
        "shared_down": (SHARED_INTER // tp, HIDDEN),
        "latent_up": (LATENT, HIDDEN),
        "dense_gate_up": (HIDDEN, 2 * DENSE_INTER // tp),
        "dense_down": (DENSE_INTER // tp, HIDDEN),
    }
    if shape not in table:
        raise ValueError(f"unknown GEMM shape '{shape}' (known: {', '.join(table)})")
    return table[shape]


SHAPE_NAMES: tuple[str, ...] = ("kda_in_proj", "kda_f_b", "kda_o_proj", "mla_qkv_a", "mla_q_b", "mla_g_proj",
                                "mla_o_proj", "latent_down", "shared_gate_up", "shared_down", "latent_up",
                                "dense_gate_up", "dense_down")
# {tp: {name: (K, N)}}: every per-rank bf16 GEMM shape of K3 at TP8 and TP16
SHAPES: dict[int, dict[str, tuple[int, int]]] = {tp: {s: gemm_kn(s, tp) for s in SHAPE_NAMES} for tp in (8, 16)}

INPUTS = (
    TensorSpec("x", ("B", "K"), "bf16", Role.ACTIVATION, "activation rows"),
    TensorSpec("weight", ("N", "K"), "bf16", Role.WEIGHT, "nn.Linear weight"),
)
OUTPUTS = (TensorSpec("out", ("B", "N"), "bf16", Role.OUTPUT, "x @ weight^T"),)


def dims(point: Point) -> dict[str, int]:
    k, n = gemm_kn(point.shape or DEFAULT_SHAPE, point.tp)
    return {"B": point.batch, "K": k, "N": n}


def reference(x: torch.Tensor, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"out": (x.float() @ weight.float().t()).to(torch.bfloat16)}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    return {"x": randn((d["B"], d["K"]), gen, device),
            "weight": randn((d["N"], d["K"]), gen, device, scale=d["K"] ** -0.5)}


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    return 2 * d["B"] * d["K"] * d["N"]


DEFINITION = OpDefinition(
    name="skinny_gemm",
    summary="bf16 x @ W^T (fp32 accumulate) at every per-rank GEMM shape of K3",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={"out": Tolerance(CheckKind.REL_NORM, rtol=BF16_REDUCTION_REL_NORM,
                                 reason="fp32 accumulation in any order (split-K included) plus one bf16 rounding "
                                        "is ~2e-3; 1e-2 still catches a wrong tile or a dropped K-slice")},
    make_inputs=make_inputs,
    reference=reference,
    notes='Point.shape picks one of 13 named per-rank GEMMs (extra["shapes"][tp]); "" = latent_down.',
    scope_axes=("arch", "tp", "batch", "shape"),
    extra={"shapes": SHAPES, "shape_names": SHAPE_NAMES, "default_shape": DEFAULT_SHAPE},
)
