"""attn_res (K3 AttnRes, "attention residuals", block size 12), fp32 compute:

    new_prefix = bf16(prefix + delta)               delta = the previous sublayer's output
    V          = [blocks_0, ..., blocks_{NB-1}, new_prefix]       NB + 1 sources, [H] each
    logit_j    = rms(V_j) . w_res                   w_res = w_resnorm * w_resproj (combined)
    p          = softmax_j(logit)
    mixed      = sum_j p_j V_j                      fp32, never rounded
    out        = rms(mixed) * w_norm                the sublayer's input RMSNorm, fused

prefix, delta [B, H] bf16, blocks [B, NB, H] bf16, w_res, w_norm [H] bf16 ->
out [B, H] bf16, new_prefix [B, H] bf16; H = 7168, replicated (same at TP8/16).

Readings chosen:
- NB, the number of sealed blocks, is a named shape: `Point.shape` "nb1" .. "nb8" (SHAPES);
  "" = "nb8", the most blocks K3 ever holds (blocks[0] is the embedding, 93 layers / 12 per
  block): the worst-case traffic and the catalogue's default. The decode path's block count
  grows over the layers (1 .. 8); it calls the op with shape=f"nb{nb}" and `blocks` a
  [B, nb, H] view of its [B, 8, H] buffer (batch stride 8*H, not nb*H: kernels must take a
  strided `blocks`). `attn_res_mix` takes a list of any length.
- Appending prefix to the block list at the first sublayer of a 12-layer block is the
  decoder's bookkeeping; this op mixes the blocks it is given plus the new prefix.
- The rms inside the logit uses eps = 1e-5 like every K3 norm.
min_bytes = prefix + delta + blocks + both weights + out + new_prefix: 0.20 MB at B=1 nb8
(the doc's table says 0.17: it does not count the NB=8 worst case exactly), 11.0 MB at B=64;
nb1: 0.10 MB at B=1, 4.6 MB at B=64.
"""
from __future__ import annotations

from typing import Sequence

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import (BF16_ELEMENTWISE_ATOL, BF16_ELEMENTWISE_RTOL, HIDDEN, io_bytes, randn, rms,
                      round_bf16)

MAX_BLOCKS = 8
SHAPE_NAMES: tuple[str, ...] = tuple(f"nb{n}" for n in range(1, MAX_BLOCKS + 1))
DEFAULT_SHAPE = f"nb{MAX_BLOCKS}"

INPUTS = (
    TensorSpec("prefix", ("B", "H"), "bf16", Role.ACTIVATION, "running sum of the current block"),
    TensorSpec("delta", ("B", "H"), "bf16", Role.ACTIVATION, "previous sublayer output"),
    TensorSpec("blocks", ("B", "NB", "H"), "bf16", Role.ACTIVATION, "sealed block sums, [0] = embedding (NB = 1..8 by shape)"),
    TensorSpec("w_res", ("H",), "bf16", Role.WEIGHT, "w_resnorm * w_resproj, combined"),
    TensorSpec("w_norm", ("H",), "bf16", Role.WEIGHT, "the sublayer's input RMSNorm weight"),
)
OUTPUTS = (
    TensorSpec("out", ("B", "H"), "bf16", Role.OUTPUT, "rms(mix) * w_norm: the sublayer input"),
    TensorSpec("new_prefix", ("B", "H"), "bf16", Role.OUTPUT, "bf16(prefix + delta)"),
)


def num_blocks(shape: str) -> int:
    """NB of the named shape ("nb1" .. "nb8"; "" = the default nb8); ValueError on an unknown name."""
    name = shape or DEFAULT_SHAPE
    if name not in SHAPE_NAMES:
        raise ValueError(f"unknown attn_res shape '{shape}' (known: {', '.join(SHAPE_NAMES)})")
    return int(name[2:])


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "NB": num_blocks(point.shape), "H": HIDDEN}


def attn_res_mix(prefix: torch.Tensor, delta: torch.Tensor, blocks_list: Sequence[torch.Tensor],
                 w_res: torch.Tensor, w_norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """AttnRes over any number of blocks (each [B, H]); returns (out, new_prefix), bf16."""
    new_prefix = round_bf16(prefix.float() + delta.float())
    v = torch.stack([b.float() for b in blocks_list] + [new_prefix], dim=1)     # [B, NB+1, H]
    logits = (rms(v) * w_res.float()).sum(-1)                                  # [B, NB+1]
    p = torch.softmax(logits, dim=-1)
    mixed = (p[..., None] * v).sum(1)
    out = rms(mixed) * w_norm.float()
    return out.to(torch.bfloat16), new_prefix.to(torch.bfloat16)


def reference(prefix: torch.Tensor, delta: torch.Tensor, blocks: torch.Tensor, w_res: torch.Tensor,
              w_norm: torch.Tensor) -> dict[str, torch.Tensor]:
    out, new_prefix = attn_res_mix(prefix, delta, list(blocks.unbind(1)), w_res, w_norm)
    return {"out": out, "new_prefix": new_prefix}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    b, h = d["B"], d["H"]
    # block sums grow along the depth; scale them so that the softmax is neither flat nor one-hot
    scales = torch.linspace(1.0, 8.0, d["NB"])
    blocks = torch.randn((b, d["NB"], h), generator=gen) * scales[None, :, None]
    return {
        "prefix": randn((b, h), gen, device, scale=4.0),
        "delta": randn((b, h), gen, device),
        "blocks": blocks.to(device=device, dtype=torch.bfloat16),
        # logit_j = rms(V_j).w_res ~ N(0, H * 0.02^2) ~ N(0, 2.9): a peaked but not one-hot softmax
        "w_res": randn((h,), gen, device, scale=0.02),
        "w_norm": (1.0 + randn((h,), gen, "cpu", torch.float32, 0.1)).to(device=device, dtype=torch.bfloat16),
    }


def min_bytes(point: Point) -> int:
    return io_bytes(INPUTS + OUTPUTS, dims(point))


def flops(point: Point) -> int:
    d = dims(point)
    n = d["NB"] + 1
    # per source: square+sum (2H), dot with w_res (2H), mix (2H); add, final norm (4H)
    return d["B"] * (6 * n * d["H"] + 5 * d["H"])


DEFINITION = OpDefinition(
    name="attn_res",
    summary="K3 AttnRes: prefix += delta, softmax-mix of block sums, fused input RMSNorm",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={
        "out": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=2e-2,
                         reason="fp32 softmax weights in another order shift the mix ~1e-6; one bf16 ulp plus "
                                "slack for outputs near zero after the norm"),
        "new_prefix": Tolerance(CheckKind.ALLCLOSE, rtol=BF16_ELEMENTWISE_RTOL, atol=BF16_ELEMENTWISE_ATOL,
                                reason="a bf16 sum rounded once"),
    },
    make_inputs=make_inputs,
    reference=reference,
    notes='Point.shape "nb1".."nb8" = NB sealed blocks ("" = nb8, the K3 maximum, worst-case bytes); the decoder '
          'passes blocks as a strided [B, nb, H] view of a [B, 8, H] buffer; attn_res_mix(prefix, delta, '
          'blocks_list, w_res, w_norm) takes any number.',
    scope_axes=("arch", "tp", "batch", "dtype", "shape"),
    extra={"max_blocks": MAX_BLOCKS, "mix": attn_res_mix, "shape_names": SHAPE_NAMES, "default_shape": DEFAULT_SHAPE},
)
