"""Per-rank decoder weights: internal names, seeded random init at sensible scales.

Internal names (one rank's tensors, nn.Linear layout [out, in]):
  embed [V,H], lm_head [V,H], final_res_w [H], final_norm [H]
  layers.{i}.attn_res_w / attn_norm / mlp_res_w / mlp_norm [H]    (AttnRes w_res combined)
  KDA  layers.{i}.kda.in_proj [pad16(4*inner + f_rank + h), H]    rows: q|k|v|g_out|f_a|b|pad
       .f_b [inner, f_rank], .conv [3*inner, conv_kernel], .A_log [h] fp32,
       .dt_bias [inner] fp32, .o_norm [head_dim], .o_proj [H, inner]
  MLA  layers.{i}.mla.qkv_a [q_lora + kv_lora + rope, H], .q_a_norm [q_lora], .kv_a_norm [kv_lora],
       .q_b [h*(nope+rope), q_lora], .w_uk [h, nope, kv_lora], .w_uv [h, kv_lora, v],
       .g_proj [h*v, H], .o_proj [H, h*v]
  dense layers.{i}.mlp.gate_up [2*I, H], .down [H, I]
  MoE  layers.{i}.moe.router [E, H], .bias [E] fp32, .down [latent, H], .latent_norm [latent],
       .up [H, latent], .shared_gate_up [2*S, H], .shared_down [H, S],
       .w13 [E, 2*I, latent/2] u8, .w13_scale [E, 2*I, latent/32] u8 (MXFP4, rows gate|up),
       .w2 [E, latent, I/2] u8, .w2_scale [E, latent, I/32] u8
"""
from __future__ import annotations

import math

import torch

from reference_impls import mxfp4

from .config import ModelConfig

Weights = dict[str, torch.Tensor]

# mean of e2m1 value^2 over the 16 codes: (0+.25+1+2.25+4+9+16+36)/8 = 8.5625
_E2M1_RMS = math.sqrt(8.5625)


class _Init:
    def __init__(self, seed: int, device: torch.device) -> None:
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device = device

    def normal(self, shape, std: float, dtype=torch.bfloat16) -> torch.Tensor:
        t = torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32) * std
        return t.to(dtype)

    def linear(self, out_f: int, in_f: int) -> torch.Tensor:
        return self.normal((out_f, in_f), in_f ** -0.5)

    def norm(self, n: int, dtype=torch.bfloat16) -> torch.Tensor:
        return (1.0 + self.normal((n,), 0.05, torch.float32)).to(dtype)

    def mxfp4(self, rows: tuple[int, ...], k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Uniform codes, scale 2^e with e chosen so that a row has rms ~ 1/sqrt(k)."""
        e = round(math.log2(1.0 / (_E2M1_RMS * math.sqrt(k))))
        packed = torch.randint(0, 256, (*rows, k // 2), generator=self.gen, device=self.device,
                               dtype=torch.int32).to(torch.uint8)
        scale = torch.randint(mxfp4.E8M0_BIAS + e - 1, mxfp4.E8M0_BIAS + e + 2, (*rows, k // mxfp4.GROUP),
                              generator=self.gen, device=self.device, dtype=torch.int32).to(torch.uint8)
        return packed, scale


def init_weights(cfg: ModelConfig, seed: int = 0, device: str | torch.device = "cpu") -> Weights:
    """Seeded random weights of one rank. Activations stay O(1) through every layer."""
    dev = torch.device(device)
    g = _Init(seed, dev)
    h_res = cfg.hidden ** -0.5          # logit_j = rms(V_j) . w_res ~ N(0, 1)
    w: Weights = {
        "embed": g.normal((cfg.vocab, cfg.hidden), 1.0),
        "lm_head": g.linear(cfg.vocab, cfg.hidden),
        "final_res_w": g.normal((cfg.hidden,), h_res),
        "final_norm": g.norm(cfg.hidden),
    }
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        w[p + "attn_res_w"] = g.normal((cfg.hidden,), h_res)
        w[p + "attn_norm"] = g.norm(cfg.hidden)
        w[p + "mlp_res_w"] = g.normal((cfg.hidden,), h_res)
        w[p + "mlp_norm"] = g.norm(cfg.hidden)
        if cfg.is_mla(i):
            w.update(_mla(cfg, g, p + "mla."))
        else:
            w.update(_kda(cfg, g, p + "kda."))
        if cfg.is_dense(i):
            w[p + "mlp.gate_up"] = g.linear(2 * cfg.dense_inter, cfg.hidden)
            w[p + "mlp.down"] = g.linear(cfg.hidden, cfg.dense_inter)
        else:
            w.update(_moe(cfg, g, p + "moe."))
    return w


def _kda(cfg: ModelConfig, g: _Init, p: str) -> Weights:
    inner, h = cfg.kda_inner, cfg.kda_heads
    rows = 4 * inner + cfg.f_rank + h
    in_proj = torch.cat([g.linear(rows, cfg.hidden),
                         torch.zeros(cfg.kda_in_proj_rows - rows, cfg.hidden, dtype=torch.bfloat16, device=g.device)])
    # A = exp(A_log) in [1, 16): decay rates of the heads; dt_bias shifts the gate input
    a_log = torch.log(1.0 + 15.0 * torch.rand(h, generator=g.gen, device=g.device))
    return {
        p + "in_proj": in_proj,
        p + "f_b": g.linear(inner, cfg.f_rank),
        p + "conv": g.normal((3 * inner, cfg.conv_kernel), cfg.conv_kernel ** -0.5),
        p + "A_log": a_log.float(),
        p + "dt_bias": g.normal((inner,), 0.5, torch.float32),
        p + "o_norm": g.norm(cfg.kda_head_dim),
        p + "o_proj": g.linear(cfg.hidden, inner),
    }


def _mla(cfg: ModelConfig, g: _Init, p: str) -> Weights:
    h = cfg.mla_heads
    return {
        p + "qkv_a": g.linear(cfg.q_lora + cfg.kv_width, cfg.hidden),
        p + "q_a_norm": g.norm(cfg.q_lora),
        p + "kv_a_norm": g.norm(cfg.kv_lora),
        p + "q_b": g.linear(h * cfg.qk_head, cfg.q_lora),
        p + "w_uk": g.normal((h, cfg.qk_nope, cfg.kv_lora), cfg.kv_lora ** -0.5),
        p + "w_uv": g.normal((h, cfg.kv_lora, cfg.v_head), cfg.kv_lora ** -0.5),
        p + "g_proj": g.linear(h * cfg.v_head, cfg.hidden),
        p + "o_proj": g.linear(cfg.hidden, h * cfg.v_head),
    }


def _moe(cfg: ModelConfig, g: _Init, p: str) -> Weights:
    w13, w13_s = g.mxfp4((cfg.n_experts, 2 * cfg.moe_inter), cfg.latent)
    w2, w2_s = g.mxfp4((cfg.n_experts, cfg.latent), cfg.moe_inter)
    return {
        p + "router": g.linear(cfg.n_experts, cfg.hidden),
        p + "bias": g.normal((cfg.n_experts,), 0.01, torch.float32),
        p + "down": g.linear(cfg.latent, cfg.hidden),
        p + "latent_norm": g.norm(cfg.latent),
        p + "up": g.linear(cfg.hidden, cfg.latent),
        p + "shared_gate_up": g.linear(2 * cfg.shared_inter, cfg.hidden),
        p + "shared_down": g.linear(cfg.hidden, cfg.shared_inter),
        p + "w13": w13, p + "w13_scale": w13_s, p + "w2": w2, p + "w2_scale": w2_s,
    }
