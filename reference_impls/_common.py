"""Helpers shared by the reference modules: K3 constants, seeded generators, byte counts."""
from __future__ import annotations

import torch

from harness.opdef import DTYPES, Point, RoutingProfile, TensorSpec

# Kimi K3 text config (docs/kimi_k3_decode_ops.md)
HIDDEN = 7168
VOCAB = 163840
RMS_EPS = 1e-5
N_HEADS = 96                 # KDA and MLA heads before TP
HEAD_DIM = 128
N_EXPERTS = 896
TOP_K = 16
LATENT = 3584                # latent MoE width
MOE_INTER = 3072             # routed-expert intermediate before TP
SHARED_INTER = 2 * 3072      # two shared experts, fused
SITU_B, SITU_BL = 4.0, 25.0


def heads(point: Point) -> int:
    return N_HEADS // point.tp


def numel(spec: TensorSpec, dims: dict[str, int]) -> int:
    n = 1
    for d in spec.resolve(dims):
        n *= d
    return n


def nbytes(spec: TensorSpec, dims: dict[str, int]) -> int:
    return numel(spec, dims) * DTYPES[spec.dtype].itemsize


def io_bytes(specs, dims: dict[str, int]) -> int:
    return sum(nbytes(s, dims) for s in specs)


def randn(shape, gen: torch.Generator, device: str, dtype: torch.dtype = torch.bfloat16, scale: float = 1.0):
    """Standard-normal draw on the CPU generator (reproducible on any device), then moved."""
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(device=device, dtype=dtype)


def rms(x: torch.Tensor, eps: float = RMS_EPS) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) in fp32 over the last dim (no weight)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def situ(g: torch.Tensor, u: torch.Tensor, b: float = SITU_B, bl: float = SITU_BL) -> torch.Tensor:
    """SiTU(g, u) = b*tanh(g/b)*sigmoid(g) * bl*tanh(u/bl), fp32."""
    g, u = g.float(), u.float()
    return b * torch.tanh(g / b) * torch.sigmoid(g) * (bl * torch.tanh(u / bl))


def routing_bias(profile: RoutingProfile, n_experts: int, gen: torch.Generator) -> torch.Tensor:
    """An additive preference over experts that shapes which experts tokens choose:
    uniform -> small noise; zipf -> log of a Zipf(1.1) law over a random expert order;
    hot -> one expert far above the rest."""
    noise = torch.randn(n_experts, generator=gen) * 0.01
    if profile is RoutingProfile.UNIFORM:
        return noise
    if profile is RoutingProfile.ZIPF:
        order = torch.randperm(n_experts, generator=gen)
        rank = torch.empty(n_experts)
        rank[order] = torch.arange(1, n_experts + 1, dtype=torch.float32)
        return -1.1 * torch.log(rank) * 0.5 + noise
    hot = int(torch.randint(n_experts, (1,), generator=gen))
    bias = noise.clone()
    bias[hot] += 10.0
    return bias


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """Round to bf16 and back to fp32: what storing a value in a bf16 buffer does."""
    return x.to(torch.bfloat16).float()


def spec_dtype(spec: TensorSpec, point: Point, state_dtype_names: tuple[str, ...] = ()) -> torch.dtype:
    """The torch dtype of `spec` at `point`: tensors named in `state_dtype_names` take the
    point's state dtype (KDA's recurrent state is fp32 or bf16 per point), others their own."""
    return DTYPES[point.state_dtype if spec.name in state_dtype_names else spec.dtype]


def gumbel_topk_ids(logits: torch.Tensor, batch: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """`batch` rows of `k` distinct ids drawn without replacement with P proportional to
    exp(logits) (Gumbel top-k); int32 [batch, k] on the CPU."""
    u = torch.rand((batch, logits.numel()), generator=gen, dtype=torch.float64).clamp_(1e-12, 1 - 1e-12)
    keys = logits.double()[None, :] - torch.log(-torch.log(u))
    return torch.topk(keys, k, dim=-1).indices.to(torch.int32)


def routing_logits(profile: RoutingProfile, n_experts: int, gen: torch.Generator) -> torch.Tensor:
    """Log-probabilities (up to a constant) of experts for drawing top-k ids directly:
    uniform -> all equal; zipf -> p(rank r) ~ r^-1.1 over a random expert order;
    hot -> one random expert so far ahead that every token picks it (the rest uniform)."""
    if profile is RoutingProfile.UNIFORM:
        return torch.zeros(n_experts, dtype=torch.float64)
    if profile is RoutingProfile.ZIPF:
        order = torch.randperm(n_experts, generator=gen)
        rank = torch.empty(n_experts, dtype=torch.float64)
        rank[order] = torch.arange(1, n_experts + 1, dtype=torch.float64)
        return -1.1 * torch.log(rank)
    logits = torch.zeros(n_experts, dtype=torch.float64)
    logits[int(torch.randint(n_experts, (1,), generator=gen))] = 1e4
    return logits


def draw_topk_ids(profile: RoutingProfile, batch: int, n_experts: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Per token, k distinct experts drawn per the routing profile (int32 [batch, k], CPU)."""
    return gumbel_topk_ids(routing_logits(profile, n_experts, gen), batch, k, gen)


# Tolerances shared by the bf16-output ops. One bf16 ulp is 2^-7 relative (2^-8 rounding):
# a kernel that computes in fp32 in another order and rounds once may land one ulp away.
BF16_ELEMENTWISE_RTOL = 1.6e-2
BF16_ELEMENTWISE_ATOL = 1e-3
BF16_REDUCTION_REL_NORM = 1e-2   # GEMM-like outputs: bf16 inputs/intermediates, fp32 accumulate
