"""Loading real Kimi K3 checkpoint tensors into one rank's internal weights.

Tensor names (our reading of the published K3 checkpoint layout, `KimiK3ForConditionalGeneration`,
text model under `language_model.`; checked against public loaders of vLLM's kimi_linear and
a K3 synthetic-checkpoint generator; the MLA `g_proj` output gate is the one name we inferred
from the model description rather than read):
  language_model.model.embed_tokens.weight [V,H]         language_model.lm_head.weight [V,H]
  language_model.model.norm.weight, .output_attn_res_norm.weight [H], .output_attn_res_proj.weight [1,H]
  layers.{i}.input_layernorm / post_attention_layernorm / self_attention_res_norm / mlp_res_norm .weight [H]
  layers.{i}.self_attention_res_proj / mlp_res_proj .weight [1,H]
  KDA  layers.{i}.self_attn.{q,k,v,g}_proj.weight [96*128,H], b_proj [96,H], f_a_proj [128,H],
       f_b_proj [96*128,128], o_proj [H,96*128], o_norm [128] fp32, {q,k,v}_conv1d [96*128,1,4] fp32,
       A_log [128] fp32 (first 96 = per-head rates), dt_bias [96*128] fp32
  MLA  layers.{i}.self_attn.q_a_proj [1536,H], q_a_layernorm [1536], q_b_proj [96*192,1536],
       kv_a_proj_with_mqa [576,H], kv_a_layernorm [512], kv_b_proj [96*(128+128),512],
       g_proj [96*128,H], o_proj [H,96*128]
  dense layers.0.mlp.{gate,up}_proj [I,H], down_proj [H,I]
  MoE  layers.{i}.block_sparse_moe.gate.weight [896,H], gate.e_score_correction_bias [896] fp32,
       routed_expert_down_proj [3584,H], routed_expert_norm [3584], routed_expert_up_proj [H,3584],
       shared_experts.{gate,up}_proj [6144,H], shared_experts.down_proj [H,6144],
       experts.{e}.{w1,w3,w2}.weight_packed (uint8, 2 e2m1 per byte) / .weight_scale (e8m0 per 32)
Rank r of TP t keeps heads / intermediate rows [r*n/t, (r+1)*n/t) of column-parallel weights
and the matching input columns of row-parallel ones; latent, router and q_a/kv_a are replicated.
The embedding and LM head are kept whole (not vocab-parallel) so one rank yields full logits.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from harness.errors import UserError

from .config import ModelConfig, Residual
from .weights import Weights

P = "language_model.model."
LM_HEAD = "language_model.lm_head.weight"
Getter = Callable[[str], torch.Tensor]


def _rows(t: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    n = t.shape[0] // tp
    return t[rank * n:(rank + 1) * n]


def _cols(t: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    n = t.shape[-1] // tp
    return t[..., rank * n:(rank + 1) * n]


def _res_w(get: Getter, norm: str, proj: str) -> torch.Tensor:
    """AttnRes logit weight: rms(V) . (w_resnorm * w_resproj), combined in fp32 then bf16."""
    return (get(norm).float() * get(proj).float().reshape(-1)).to(torch.bfloat16)


def _check_attn_res(cfg: ModelConfig) -> None:
    """The K3 checkpoint's layers are AttnRes: an -addnorm config would run another model."""
    if cfg.residual is not Residual.ATTN_RES:
        raise UserError(f"model config '{cfg.name}' uses the {cfg.residual.value} residual: a K3 checkpoint "
                        "has AttnRes layers; load it with an AttnRes config (e.g. k3-tp8-rank)")


def convert(get: Getter, cfg: ModelConfig, rank: int = 0) -> Weights:
    """Internal weights of rank `rank` from checkpoint tensors served by `get(name)`."""
    _check_attn_res(cfg)
    tp = cfg.tp
    bf = lambda t: t.to(torch.bfloat16).contiguous()  # noqa: E731
    w: Weights = {"embed": bf(get(P + "embed_tokens.weight")), "lm_head": bf(get(LM_HEAD)),
                  "final_res_w": _res_w(get, P + "output_attn_res_norm.weight", P + "output_attn_res_proj.weight"),
                  "final_norm": bf(get(P + "norm.weight"))}
    for i in range(cfg.n_layers):
        c, p = f"{P}layers.{i}.", f"layers.{i}."
        w[p + "attn_res_w"] = _res_w(get, c + "self_attention_res_norm.weight", c + "self_attention_res_proj.weight")
        w[p + "attn_norm"] = bf(get(c + "input_layernorm.weight"))
        w[p + "mlp_res_w"] = _res_w(get, c + "mlp_res_norm.weight", c + "mlp_res_proj.weight")
        w[p + "mlp_norm"] = bf(get(c + "post_attention_layernorm.weight"))
        a = c + "self_attn."
        if cfg.is_mla(i):
            m, h = p + "mla.", cfg.mla_heads
            w[m + "qkv_a"] = bf(torch.cat([get(a + "q_a_proj.weight"), get(a + "kv_a_proj_with_mqa.weight")]))
            w[m + "q_a_norm"] = bf(get(a + "q_a_layernorm.weight"))
            w[m + "kv_a_norm"] = bf(get(a + "kv_a_layernorm.weight"))
            w[m + "q_b"] = bf(_rows(get(a + "q_b_proj.weight"), rank, tp))
            kv_b = _rows(get(a + "kv_b_proj.weight"), rank, tp).reshape(h, cfg.qk_nope + cfg.v_head, cfg.kv_lora)
            w[m + "w_uk"] = bf(kv_b[:, :cfg.qk_nope])                           # k_nope = W_UK kv_c
            w[m + "w_uv"] = bf(kv_b[:, cfg.qk_nope:].transpose(1, 2))           # o = lat @ W_UV^T
            w[m + "g_proj"] = bf(_rows(get(a + "g_proj.weight"), rank, tp))
            w[m + "o_proj"] = bf(_cols(get(a + "o_proj.weight"), rank, tp))
        else:
            k, h = p + "kda.", cfg.kda_heads
            parts = [_rows(get(a + f"{n}_proj.weight"), rank, tp) for n in ("q", "k", "v", "g")]
            parts += [get(a + "f_a_proj.weight"), _rows(get(a + "b_proj.weight"), rank, tp)]
            rows = sum(t.shape[0] for t in parts)
            parts.append(torch.zeros(cfg.kda_in_proj_rows - rows, cfg.hidden))
            w[k + "in_proj"] = bf(torch.cat([t.float() for t in parts]))
            w[k + "f_b"] = bf(_rows(get(a + "f_b_proj.weight"), rank, tp))
            w[k + "conv"] = bf(torch.cat([_rows(get(a + f"{n}_conv1d.weight"), rank, tp).reshape(-1, cfg.conv_kernel)
                                          for n in ("q", "k", "v")]))
            w[k + "A_log"] = get(a + "A_log").float().reshape(-1)[rank * h:(rank + 1) * h].contiguous()
            w[k + "dt_bias"] = _rows(get(a + "dt_bias").float().reshape(-1), rank, tp).contiguous()
            w[k + "o_norm"] = bf(get(a + "o_norm.weight"))
            w[k + "o_proj"] = bf(_cols(get(a + "o_proj.weight"), rank, tp))
        if cfg.is_dense(i):
            d = c + "mlp."
            w[p + "mlp.gate_up"] = bf(torch.cat([_rows(get(d + "gate_proj.weight"), rank, tp),
                                                 _rows(get(d + "up_proj.weight"), rank, tp)]))
            w[p + "mlp.down"] = bf(_cols(get(d + "down_proj.weight"), rank, tp))
        else:
            w.update(_moe(get, cfg, c + "block_sparse_moe.", p + "moe.", rank))
    return w


def _moe(get: Getter, cfg: ModelConfig, c: str, m: str, rank: int) -> Weights:
    tp, bf = cfg.tp, (lambda t: t.to(torch.bfloat16).contiguous())
    w: Weights = {
        m + "router": bf(get(c + "gate.weight")),
        m + "bias": get(c + "gate.e_score_correction_bias").float().contiguous(),
        m + "down": bf(get(c + "routed_expert_down_proj.weight")),
        m + "latent_norm": bf(get(c + "routed_expert_norm.weight")),
        m + "up": bf(get(c + "routed_expert_up_proj.weight")),
        m + "shared_gate_up": bf(torch.cat([_rows(get(c + "shared_experts.gate_proj.weight"), rank, tp),
                                            _rows(get(c + "shared_experts.up_proj.weight"), rank, tp)])),
        m + "shared_down": bf(_cols(get(c + "shared_experts.down_proj.weight"), rank, tp)),
    }
    pad = cfg.moe_inter - cfg.moe_inter_real          # TP16 pads the routed intermediate 192 -> 256
    w13, w13s, w2, w2s = [], [], [], []
    for e in range(cfg.n_experts):
        x = f"{c}experts.{e}."
        g = [_rows(get(x + f"{n}.weight_packed"), rank, tp) for n in ("w1", "w3")]
        gs = [_rows(get(x + f"{n}.weight_scale"), rank, tp) for n in ("w1", "w3")]
        if pad:
            g = [torch.cat([t, torch.zeros(pad, t.shape[1], dtype=torch.uint8)]) for t in g]
            gs = [torch.cat([t, torch.full((pad, t.shape[1]), 127, dtype=torch.uint8)]) for t in gs]
        w13.append(torch.cat(g))
        w13s.append(torch.cat(gs))
        d, ds = _cols(get(x + "w2.weight_packed"), rank, tp), _cols(get(x + "w2.weight_scale"), rank, tp)
        if pad:   # zero codes in the padded input columns: they contribute exactly 0
            d = torch.cat([d, torch.zeros(d.shape[0], pad // 2, dtype=torch.uint8)], dim=1)
            ds = torch.cat([ds, torch.full((ds.shape[0], pad // 32), 127, dtype=torch.uint8)], dim=1)
        w2.append(d)
        w2s.append(ds)
    w.update({m + "w13": torch.stack(w13), m + "w13_scale": torch.stack(w13s),
              m + "w2": torch.stack(w2), m + "w2_scale": torch.stack(w2s)})
    return w


def load_checkpoint(path: str | Path, cfg: ModelConfig, rank: int = 0, device: str = "cpu") -> Weights:
    """Rank `rank`'s weights from a safetensors file or a folder of *.safetensors shards."""
    from safetensors import safe_open  # noqa: PLC0415 - CPU-side dependency

    _check_attn_res(cfg)
    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"no .safetensors files under {path}")
    handles = [safe_open(str(f), framework="pt") for f in files]
    where = {name: h for h in handles for name in h.keys()}

    def get(name: str) -> torch.Tensor:
        if name not in where:
            raise KeyError(f"checkpoint has no tensor '{name}'")
        return where[name].get_tensor(name)

    w = convert(get, cfg, rank)
    return {k: v.to(device) for k, v in w.items()}


def to_checkpoint(w: Weights, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The inverse of `convert` for a whole model (tp == 1): checkpoint-named tensors.
    AttnRes weights are written as res_norm = 1 and res_proj = the combined w_res."""
    if cfg.tp != 1:
        raise ValueError("to_checkpoint writes a whole model: use a tp=1 config")
    _check_attn_res(cfg)
    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    out = {P + "embed_tokens.weight": w["embed"], LM_HEAD: w["lm_head"], P + "norm.weight": w["final_norm"],
           P + "output_attn_res_norm.weight": ones(cfg.hidden), P + "output_attn_res_proj.weight": w["final_res_w"][None]}
    for i in range(cfg.n_layers):
        c, p = f"{P}layers.{i}.", f"layers.{i}."
        out[c + "self_attention_res_norm.weight"] = ones(cfg.hidden)
        out[c + "self_attention_res_proj.weight"] = w[p + "attn_res_w"][None]
        out[c + "mlp_res_norm.weight"] = ones(cfg.hidden)
        out[c + "mlp_res_proj.weight"] = w[p + "mlp_res_w"][None]
        out[c + "input_layernorm.weight"] = w[p + "attn_norm"]
        out[c + "post_attention_layernorm.weight"] = w[p + "mlp_norm"]
        a = c + "self_attn."
        if cfg.is_mla(i):
            m = p + "mla."
            out[a + "q_a_proj.weight"], out[a + "kv_a_proj_with_mqa.weight"] = w[m + "qkv_a"].split([cfg.q_lora, cfg.kv_width])
            out[a + "q_a_layernorm.weight"], out[a + "kv_a_layernorm.weight"] = w[m + "q_a_norm"], w[m + "kv_a_norm"]
            out[a + "q_b_proj.weight"] = w[m + "q_b"]
            kv_b = torch.cat([w[m + "w_uk"], w[m + "w_uv"].transpose(1, 2)], dim=1)
            out[a + "kv_b_proj.weight"] = kv_b.reshape(-1, cfg.kv_lora)
            out[a + "g_proj.weight"], out[a + "o_proj.weight"] = w[m + "g_proj"], w[m + "o_proj"]
        else:
            k, inner = p + "kda.", cfg.kda_inner
            q, kk, v, g, f_a, b, _ = w[k + "in_proj"].split(
                [inner] * 4 + [cfg.f_rank, cfg.kda_heads, cfg.kda_in_proj_rows - 4 * inner - cfg.f_rank - cfg.kda_heads])
            for n, t in zip("qkvg", (q, kk, v, g)):
                out[a + f"{n}_proj.weight"] = t
            out[a + "f_a_proj.weight"], out[a + "b_proj.weight"] = f_a, b
            out[a + "f_b_proj.weight"], out[a + "o_proj.weight"] = w[k + "f_b"], w[k + "o_proj"]
            for n, t in zip("qkv", w[k + "conv"].float().split(inner)):
                out[a + f"{n}_conv1d.weight"] = t[:, None, :]
            a_log = torch.zeros(max(128, cfg.kda_heads))
            a_log[:cfg.kda_heads] = w[k + "A_log"]
            out[a + "A_log"], out[a + "dt_bias"] = a_log, w[k + "dt_bias"]
            out[a + "o_norm.weight"] = w[k + "o_norm"].float()
        if cfg.is_dense(i):
            out[c + "mlp.gate_proj.weight"], out[c + "mlp.up_proj.weight"] = w[p + "mlp.gate_up"].chunk(2)
            out[c + "mlp.down_proj.weight"] = w[p + "mlp.down"]
        else:
            m, b = p + "moe.", c + "block_sparse_moe."
            out[b + "gate.weight"], out[b + "gate.e_score_correction_bias"] = w[m + "router"], w[m + "bias"]
            out[b + "routed_expert_down_proj.weight"], out[b + "routed_expert_norm.weight"] = w[m + "down"], w[m + "latent_norm"]
            out[b + "routed_expert_up_proj.weight"] = w[m + "up"]
            out[b + "shared_experts.gate_proj.weight"], out[b + "shared_experts.up_proj.weight"] = w[m + "shared_gate_up"].chunk(2)
            out[b + "shared_experts.down_proj.weight"] = w[m + "shared_down"]
            for e in range(cfg.n_experts):
                x = f"{b}experts.{e}."
                out[x + "w1.weight_packed"], out[x + "w3.weight_packed"] = w[m + "w13"][e].chunk(2)
                out[x + "w1.weight_scale"], out[x + "w3.weight_scale"] = w[m + "w13_scale"][e].chunk(2)
                out[x + "w2.weight_packed"], out[x + "w2.weight_scale"] = w[m + "w2"][e], w[m + "w2_scale"][e]
    return {k: v.contiguous() for k, v in out.items()}
