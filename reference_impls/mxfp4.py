"""MXFP4 (OCP microscaling FP4): e2m1 values packed two per byte, one e8m0 scale per 32.

    value = e2m1(nibble) * 2^(scale - 127)

e2m1 code (4 bits, s e e m): sign bit 3; magnitudes of codes 0..7 are
0, 0.5, 1, 1.5, 2, 3, 4, 6. e8m0 scale byte 255 is NaN (never produced by `encode`).

Packing (the OCP / torch float4_e2m1fn_x2 convention): element 2i of a row sits in the LOW
nibble of byte i, element 2i+1 in the HIGH nibble. Scales group 32 consecutive elements
of the last (contraction) dim: a [N, K] matrix is stored as uint8 [N, K/2] plus uint8
scales [N, K/32].

Not an op module: helpers for the moe_experts reference, its tests and the decoder.
"""
from __future__ import annotations

import functools

import torch

GROUP = 32
E8M0_BIAS = 127
E8M0_NAN = 255
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0


def e2m1_table(device: str | torch.device = "cpu") -> torch.Tensor:
    """fp32 [16]: the value of each 4-bit code (code 8 is -0.0)."""
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32)
    return torch.cat([mags, -mags]).to(device)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/2] -> int64 codes [..., K], low nibble first."""
    p = packed.to(torch.int64)
    return torch.stack([p & 0xF, p >> 4], dim=-1).flatten(-2)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """int codes [..., K] (0..15, K even) -> uint8 [..., K/2], low nibble first."""
    c = codes.to(torch.int64)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)


def e8m0_to_float(scale: torch.Tensor) -> torch.Tensor:
    """uint8 e8m0 -> fp32 2^(s-127); 255 -> NaN."""
    s = scale.to(torch.int32)
    out = torch.exp2((s - E8M0_BIAS).to(torch.float32))
    return torch.where(s == E8M0_NAN, torch.full_like(out, float("nan")), out)


def byte_table(device: str | torch.device = "cpu") -> torch.Tensor:
    """fp32 [256, 2]: the (low, high) nibble values of every byte. Built once per device
    (a host-to-device copy inside a CUDA-graph capture would fail), never written to."""
    return _byte_table(str(torch.device(device)))


@functools.lru_cache(maxsize=None)
def _byte_table(device: str) -> torch.Tensor:
    t = e2m1_table(device)
    return torch.stack([t.repeat(16), t.repeat_interleave(16)], dim=-1)


def decode(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """uint8 [..., K/2] and uint8 scales [..., K/32] -> fp32 [..., K]."""
    k = packed.shape[-1] * 2
    if scale.shape[-1] * GROUP != k:
        raise ValueError(f"{scale.shape[-1]} scales cannot cover {k} values in groups of {GROUP}")
    # one gather of (low, high) pairs per byte, then the group scale in place: 2 passes
    vals = torch.nn.functional.embedding(packed.int(), byte_table(packed.device))      # [..., K/2, 2]
    vals = vals.view(*packed.shape[:-1], k // GROUP, GROUP)
    vals.mul_(e8m0_to_float(scale).unsqueeze(-1))
    return vals.view(*packed.shape[:-1], k)


def encode(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [..., K] (K a multiple of 32) -> (uint8 [..., K/2], uint8 e8m0 [..., K/32]).

    Per group: scale = 2^(floor(log2(amax)) - 2) so that amax / scale lies in [4, 8); values
    are rounded to the nearest e2m1 magnitude (ties to the smaller code) and clamped to 6,
    the OCP MX recipe. All-zero groups get scale 2^-127."""
    x = x.float()
    k = x.shape[-1]
    if k % GROUP:
        raise ValueError(f"last dim {k} is not a multiple of {GROUP}")
    g = x.reshape(*x.shape[:-1], k // GROUP, GROUP)
    amax = g.abs().amax(-1)
    exp = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(1e-38))) - 2, torch.full_like(amax, -127.0))
    exp = exp.clamp(-127, 127)
    scaled = g / torch.exp2(exp)[..., None]
    mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=x.device)
    idx = (scaled.abs().clamp(max=E2M1_MAX)[..., None] - mags).abs().argmin(-1)
    codes = idx + 8 * (scaled < 0).to(torch.int64)
    codes = codes.reshape(*x.shape[:-1], k)
    return pack_nibbles(codes), (exp + E8M0_BIAS).to(torch.uint8)


def random_bytes(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Uniform uint8 of `shape`, drawn as int64 words and viewed as bytes (8x fewer draws)."""
    n = 1
    for d in shape:
        n *= d
    words = torch.randint(-2**63, 2**63 - 1, ((n + 7) // 8,), generator=gen, dtype=torch.int64)
    return words.view(torch.uint8)[:n].reshape(shape)


def random_weights(rows_shape: tuple[int, ...], k: int, gen: torch.Generator, scale_exp: int,
                   spread: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Random MXFP4 weights on the CPU: every byte uniform (both nibbles uniform over all 16
    codes), e8m0 scales drawn in 2^(scale_exp +- spread). Drawn straight into uint8 so that
    all 896 experts (~1.8 GB at TP8) fit. Returns (packed [*rows, k/2], scales [*rows, k/32])."""
    packed = random_bytes((*rows_shape, k // 2), gen)
    exps = torch.randint(E8M0_BIAS + scale_exp - spread, E8M0_BIAS + scale_exp + spread + 1,
                         (*rows_shape, k // GROUP), generator=gen, dtype=torch.uint8)
    return packed, exps
