"""mla_decode: the absorbed latent-attention core of K3's MLA layers (NoPE), fp32 compute.

Per token b and local head (h = 96/TP), over the first n = cache_lens[b] cache rows
(row t = [kv_c (512) | k_pe (64)]):

    score[t] = (q_lat . kv_c[t] + q_pe . k_pe[t]) * 192^-0.5
    split the n rows into num_splits contiguous chunks of ceil(n / num_splits) rows; per chunk i:
        m_i = max score;  l_i = sum exp(score - m_i)
        lat_i = sum_t exp(score[t] - m_i) kv_c[t] / l_i ;  lse_i = m_i + log(l_i)
    lse = logsumexp_i lse_i                  (an empty chunk has lse_i = -inf, weight 0)
    lat = sum_i exp(lse_i - lse) * lat_i     = softmax(score) @ kv_c

q_lat [B,h,512] bf16 (q_nope absorbed by W_UK), q_pe [B,h,64] bf16, kv_cache [B,L,576] bf16
(one dense cache per sequence, rows >= cache_lens[b] are ignored), cache_lens [B] int32 in
1..L -> lat [B,h,512] bf16, lse [B,h] fp32 (natural log of sum_t exp(score[t]), score scaled).
The split count does not change the result beyond fp32 rounding; it is a parameter of the
reference so the combine is exercised exactly as a split-KV kernel computes it.

Readings chosen:
- cache_lens vary by a fixed schedule: row i of B holds L - floor(i*L / 2B) tokens
  (L, ..., ~L/2; mean ~0.75 L), rows shuffled by the seed. min_bytes counts exactly the
  rows read: sum(cache_lens) * 576 * 2 bytes + q, cache_lens, lat, lse.
- No DCP: a rank reads its sequences' whole caches. The doc's "4.7 / 302 MB at L=32K with
  DCP8" is per rank under 8-way decode-context parallelism: our B=1 L=32K figure is 37.7 MB
  (8 x 4.7); at B=64 ours is ~1.8 GB (mean length 0.75 L, vs 8 x 302 at full L).
"""
from __future__ import annotations

import math

import torch

from harness.opdef import CheckKind, OpDefinition, Point, Role, TensorSpec, Tolerance

from ._common import BF16_REDUCTION_REL_NORM, heads, io_bytes, randn

KV_LORA, ROPE = 512, 64
CACHE_DIM = KV_LORA + ROPE
SOFTMAX_SCALE = (128 + 64) ** -0.5          # qk_nope + qk_rope head dim
DEFAULT_SPLITS = 4

INPUTS = (
    TensorSpec("q_lat", ("B", "NH", "R"), "bf16", Role.ACTIVATION, "q_nope @ W_UK: query in latent space"),
    TensorSpec("q_pe", ("B", "NH", "P"), "bf16", Role.ACTIVATION, "decoupled query part (no rotary on K3)"),
    TensorSpec("kv_cache", ("B", "L", "CD"), "bf16", Role.ACTIVATION, "[kv_c 512 | k_pe 64] per token"),
    TensorSpec("cache_lens", ("B",), "int32", Role.ACTIVATION, "valid cache rows per sequence (1..L)"),
)
OUTPUTS = (
    TensorSpec("lat", ("B", "NH", "R"), "bf16", Role.OUTPUT, "softmax(score) @ kv_c"),
    TensorSpec("lse", ("B", "NH"), "fp32", Role.OUTPUT, "natural-log sum-exp of the scaled scores"),
)


def dims(point: Point) -> dict[str, int]:
    return {"B": point.batch, "NH": heads(point), "R": KV_LORA, "P": ROPE, "L": max(point.context, 1),
            "CD": CACHE_DIM}


def cache_lens_schedule(batch: int, context: int) -> list[int]:
    """Lengths before shuffling: L - floor(i*L / 2B) for i < B (at least 1)."""
    return [max(1, context - (i * context) // (2 * batch)) for i in range(batch)]


def split_partials(scores: torch.Tensor, kv_c: torch.Tensor, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [h, n] fp32, kv_c [n, 512] fp32 -> (lat_i [S, h, 512], lse_i [S, h]) per chunk."""
    h, n = scores.shape
    chunk = math.ceil(n / num_splits)
    lats, lses = [], []
    for i in range(num_splits):
        s = scores[:, i * chunk:(i + 1) * chunk]
        if s.shape[1] == 0:
            lats.append(torch.zeros(h, kv_c.shape[1]))
            lses.append(torch.full((h,), float("-inf")))
            continue
        m = s.max(-1, keepdim=True).values
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        lats.append((p @ kv_c[i * chunk:(i + 1) * chunk]) / l)
        lses.append((m + torch.log(l)).squeeze(-1))
    return torch.stack(lats), torch.stack(lses)


def combine(lat_i: torch.Tensor, lse_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-sum-exp combine of split partials: [S, h, R], [S, h] -> [h, R], [h]."""
    lse = torch.logsumexp(lse_i, dim=0)
    w = torch.exp(lse_i - lse[None])                     # exp(-inf) = 0 for empty chunks
    return (w[..., None] * lat_i).sum(0), lse


def reference(q_lat: torch.Tensor, q_pe: torch.Tensor, kv_cache: torch.Tensor, cache_lens: torch.Tensor,
              num_splits: int = DEFAULT_SPLITS) -> dict[str, torch.Tensor]:
    """All rows at once with masks (no host read-back of cache_lens), so the decode step
    that calls it can be captured in a CUDA graph. Row b's chunk i covers positions
    [i*c_b, min((i+1)*c_b, n_b)) with c_b = ceil(n_b / num_splits), as `split_partials`."""
    c = kv_cache.float()                                          # [B, L, 576]
    kv_c = c[..., :KV_LORA]
    scores = (torch.einsum("bhr,blr->bhl", q_lat.float(), kv_c)
              + torch.einsum("bhp,blp->bhl", q_pe.float(), c[..., KV_LORA:])) * SOFTMAX_SCALE
    n = cache_lens.to(torch.int64)[:, None]                       # [B, 1]
    chunk = (n + num_splits - 1) // num_splits
    pos = torch.arange(kv_cache.shape[1], device=kv_cache.device)[None, :]   # [1, L]
    lat_i, lse_i = [], []
    for i in range(num_splits):
        inside = (pos >= i * chunk) & (pos < torch.minimum((i + 1) * chunk, n))        # [B, L]
        s = scores.masked_fill(~inside[:, None, :], float("-inf"))
        m = s.amax(-1, keepdim=True)
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m_safe)                                 # 0 outside the chunk
        l = p.sum(-1, keepdim=True)
        lat_i.append(torch.einsum("bhl,blr->bhr", p, kv_c) / l.clamp_min(1e-30))
        lse_i.append((m_safe + torch.log(l)).squeeze(-1))         # log(0) = -inf: empty chunk
    lse_all = torch.stack(lse_i)                                  # [S, B, h]
    lse = torch.logsumexp(lse_all, dim=0)
    w = torch.exp(lse_all - lse[None])
    lat = (w[..., None] * torch.stack(lat_i)).sum(0)
    return {"lat": lat.to(torch.bfloat16), "lse": lse}


def make_inputs(point: Point, gen: torch.Generator, device: str = "cpu") -> dict[str, torch.Tensor]:
    d = dims(point)
    lens = torch.tensor(cache_lens_schedule(d["B"], d["L"]), dtype=torch.int32)
    lens = lens[torch.randperm(d["B"], generator=gen)]
    # q_lat ~ N(0, 1.5^2): score std ~ 1.5 * sqrt(512) * 192^-0.5 ~ 2.4, a peaked softmax
    return {
        "q_lat": randn((d["B"], d["NH"], d["R"]), gen, device, scale=1.5),
        "q_pe": randn((d["B"], d["NH"], d["P"]), gen, device),
        "kv_cache": randn((d["B"], d["L"], d["CD"]), gen, device),
        "cache_lens": lens.to(device),
    }


def min_bytes(point: Point) -> int:
    d = dims(point)
    cache = sum(cache_lens_schedule(d["B"], d["L"])) * CACHE_DIM * 2
    rest = [s for s in INPUTS + OUTPUTS if s.name != "kv_cache"]
    return cache + io_bytes(rest, d)


def flops(point: Point) -> int:
    d = dims(point)
    tokens = sum(cache_lens_schedule(d["B"], d["L"]))
    return tokens * d["NH"] * (2 * CACHE_DIM + 2 * KV_LORA + 4)


DEFINITION = OpDefinition(
    name="mla_decode",
    summary="absorbed MLA decode: latent scores over a 576-wide cache, split-KV + LSE combine",
    inputs=INPUTS,
    outputs=OUTPUTS,
    dims=dims,
    flops=flops,
    min_bytes=min_bytes,
    tolerances={
        "lat": Tolerance(CheckKind.REL_NORM, rtol=BF16_REDUCTION_REL_NORM,
                         reason="bf16 P before P@V (FlashMLA does) ~2e-3; fp32 combine in any split count"),
        "lse": Tolerance(CheckKind.ALLCLOSE, rtol=1e-3, atol=1e-3,
                         reason="fp32 scores in another order and exp2/log2 forms: ~1e-5 on values ~5-15"),
    },
    make_inputs=make_inputs,
    reference=reference,
    notes="cache_lens follow a fixed schedule (L down to ~L/2, shuffled by the seed) and min_bytes counts exactly those rows; no DCP (the doc's bytes are per DCP8 rank); lse is natural-log.",
    scope_axes=("arch", "tp", "batch", "context"),
    uses_context=True,
    extra={"softmax_scale": SOFTMAX_SCALE, "num_splits": DEFAULT_SPLITS, "combine": combine},
)
