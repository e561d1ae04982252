"""Decoder configurations: one type, six presets.

`tiny` runs on a CPU in seconds with K3's layer pattern and code paths at small widths.
`k3-tp8-rank` / `k3-tp16-rank` are the true per-rank widths of one GPU of a TP8 / TP16
deployment of Kimi K3 (docs/kimi_k3_decode_ops.md) with a configurable layer count: the
compute of one rank, without the all-reduces (a single process plays rank 0).

`residual` picks the residual stream: K3's AttnRes (op attn_res, the default) or the
K2-style fused add + RMSNorm (op add_rmsnorm). The `-addnorm` presets (`tiny-addnorm`,
`k3-tp8-rank-addnorm`, `k3-tp16-rank-addnorm`) are the same widths with the K2-style
residual: the decode path on which an add_rmsnorm kernel runs (numerics_model, layer A/B).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import enum
from dataclasses import dataclass, replace
from typing import Callable

from harness.errors import UserError


class Residual(str, enum.Enum):
    """The residual stream of a decoder layer; the value is the catalogue op it runs."""

    ATTN_RES = "attn_res"          # K3: AttnRes over the sealed block sums
    ADD_NORM = "add_rmsnorm"       # K2-style: r = bf16(delta + residual); h = rms(r) * w


@dataclass(frozen=True)
class ModelConfig:
    name: str
    tp: int                        # TP degree whose per-rank widths these are (1 = whole model)
    n_layers: int
    hidden: int
    vocab: int
    # KDA (per rank)
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int               # short conv taps
    f_rank: int                    # f_a_proj output (replicated), f_b_proj input
    gate_lower_bound: float
    # MLA (per rank heads; latent widths replicated)
    mla_heads: int
    q_lora: int
    kv_lora: int
    qk_nope: int
    qk_rope: int
    v_head: int
    # MoE
    n_experts: int
    top_k: int
    latent: int                    # latent MoE width (replicated down/up projections)
    moe_inter: int                 # routed-expert intermediate per rank (padded)
    shared_inter: int              # both shared experts fused, per rank
    dense_inter: int               # dense FFN of layer 1, per rank
    first_dense: int = 1
    mla_every: int = 4             # MLA at layers 4, 8, ... (1-indexed) and the last
    attn_res_block: int = 12       # layers per AttnRes block
    max_blocks: int = 8
    eps: float = 1e-5
    routed_scaling: float = 1.0
    moe_inter_unpadded: int = 0      # routed intermediate per rank before padding (0 = moe_inter)
    eos_id: int = 256
    bos_id: int = 257
    residual: Residual = Residual.ATTN_RES

    # ---- derived -------------------------------------------------------------------
    def is_mla(self, layer: int) -> bool:
        """0-indexed layer -> MLA? (K3: every 4th layer, 1-indexed, and the last)."""
        return (layer + 1) % self.mla_every == 0 or layer == self.n_layers - 1

    def is_dense(self, layer: int) -> bool:
        return layer < self.first_dense

    @property
    def kda_inner(self) -> int:
        return self.kda_heads * self.kda_head_dim

    @property
    def kda_in_proj_rows(self) -> int:
        """q, k, v, g_out (4 x inner) + f_a (f_rank) + b (heads), padded to 16 rows."""
        n = 4 * self.kda_inner + self.f_rank + self.kda_heads
        return (n + 15) // 16 * 16

    @property
    def qk_head(self) -> int:
        return self.qk_nope + self.qk_rope

    @property
    def kv_width(self) -> int:
        """One latent KV cache row: [kv_c (kv_lora), k_pe (qk_rope)]."""
        return self.kv_lora + self.qk_rope

    @property
    def moe_inter_real(self) -> int:
        return self.moe_inter_unpadded or self.moe_inter

    @property
    def is_k3_rank(self) -> bool:
        return self.tp in (8, 16) and self.hidden == 7168

    def with_layers(self, n_layers: int) -> "ModelConfig":
        if n_layers < 1:
            raise UserError(f"--layers must be >= 1 (got {n_layers})")
        return replace(self, n_layers=n_layers)


def _k3_rank(tp: int, n_layers: int) -> ModelConfig:
    inter = 3072 // tp
    return ModelConfig(
        name=f"k3-tp{tp}-rank", tp=tp, n_layers=n_layers, hidden=7168, vocab=163840,
        kda_heads=96 // tp, kda_head_dim=128, conv_kernel=4, f_rank=128, gate_lower_bound=-5.0,
        mla_heads=96 // tp, q_lora=1536, kv_lora=512, qk_nope=128, qk_rope=64, v_head=128,
        n_experts=896, top_k=16, latent=3584,
        moe_inter=max(inter, 256) if tp == 16 else inter,   # TP16: 192 padded to 256
        moe_inter_unpadded=inter,
        shared_inter=2 * 3072 // tp, dense_inter=33792 // tp,
    )


TINY = ModelConfig(
    name="tiny", tp=1, n_layers=5, hidden=64, vocab=264,     # KDA 1-3, MLA 4 and 5 (the last)
    kda_heads=2, kda_head_dim=128, conv_kernel=4, f_rank=16, gate_lower_bound=-5.0,  # kda reference fixes D=128
    mla_heads=2, q_lora=32, kv_lora=512, qk_nope=16, qk_rope=64, v_head=16,  # mla reference fixes 512+64
    n_experts=24, top_k=16, latent=32, moe_inter=32, shared_inter=32, dense_inter=64,  # router fixes top-16
    attn_res_block=2,              # seals at layers 0, 2, 4: block appends are exercised
)

ADD_NORM_SUFFIX = "-addnorm"


def _add_norm(cfg: ModelConfig) -> ModelConfig:
    """The same widths with the K2-style residual (is_k3_rank unchanged: tp and hidden are)."""
    return replace(cfg, name=cfg.name + ADD_NORM_SUFFIX, residual=Residual.ADD_NORM)


_BUILDERS: dict[str, Callable[[], ModelConfig]] = {
    "tiny": lambda: TINY,
    "k3-tp8-rank": lambda: _k3_rank(8, 8),
    "k3-tp16-rank": lambda: _k3_rank(16, 8),
    "tiny-addnorm": lambda: _add_norm(TINY),
    "k3-tp8-rank-addnorm": lambda: _add_norm(_k3_rank(8, 8)),
    "k3-tp16-rank-addnorm": lambda: _add_norm(_k3_rank(16, 8)),
}
PRESETS = tuple(_BUILDERS)


def get_config(name: str, n_layers: int | None = None) -> ModelConfig:
    """A preset by name; `n_layers` overrides the layer count (K3 rank presets default to 8)."""
    build = _BUILDERS.get(name)
    if build is None:
        raise UserError(f"unknown model config '{name}' (known: {', '.join(PRESETS)})")
    cfg = build()
    return cfg.with_layers(n_layers) if n_layers is not None else cfg


def gate_model_config(op: str, tp: int = 8) -> str:
    """The K3 rank preset on which `op` is called in the decode path: the -addnorm preset
    for add_rmsnorm (the AttnRes path never calls it), the K3 one for every other op."""
    base = f"k3-tp{tp}-rank"
    return base + ADD_NORM_SUFFIX if op == Residual.ADD_NORM.value else base


def gate_model_config_for(op: str, scope_tp: Sequence[int]) -> str:
    """gate_model_config at the TP a candidate's scope runs in: TP8 when its scope has it (the
    model gate's reference point), else its smallest TP. A kernel scoped to TP16 alone never runs
    on the TP8 rank preset, so numerics_model there would not exercise it."""
    return gate_model_config(op, 8 if not scope_tp or 8 in scope_tp else min(scope_tp))


def candidate_gate_model_config(root: Path, op: str, candidate_id: str) -> str:
    """gate_model_config_for at the scope of kernels_generated/<op>/<candidate_id>: the default
    preset of `harness gate`, the agent's gating and scripts/gpu/gate.sh."""
    from harness.toolchain.candidate import load_candidate  # noqa: PLC0415 - loaded only when asked

    return gate_model_config_for(op, load_candidate(op, root / "kernels_generated" / op / candidate_id).scope.tp)
