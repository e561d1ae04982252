"""The Kimi K3 decoder, one rank, built from the catalogue ops through the kernel registry.

Every catalogue op goes through `registry.run(op, inputs, tp=...)`; the math that is not a
catalogue op (embedding lookup, W_UK / W_UV absorb, the MLA output gate product, the LM
head, adding the MoE's latent and shared outputs) is plain torch here.

Per layer (AttnRes, block size `attn_res_block`; `prefix` is the running sum of the
current block, `blocks` the sealed block sums, blocks[0] = the embedding):
  attention input = attn_res(prefix, delta_prev, blocks) (layer 0: rmsnorm(embedding));
  at the first layer of a block the new prefix is sealed into `blocks` and restarts at 0;
  KDA or MLA; MoE input = attn_res(prefix, attn_out, blocks); dense FFN (layer 0) or
  latent MoE; after the last layer attn_res(prefix, mlp_out, blocks) with the final norm
  feeds the LM head. Layers 4, 8, ... (1-indexed) and the last are MLA, the rest KDA.
  Every attn_res call names its block count as the static key shape=f"nb{nb}" (nb = 1..8) and
  passes `blocks` as the [B, nb, H] view of the [B, max_blocks, H] buffer (not contiguous).

The FFN's gate_up GEMM and SiTU (the shared experts; the dense FFN of layer 1) run as the fused
op gemm_situ_and_mul where the registry would run its kernel (Registry.run_selected), else as
skinny_gemm then situ_and_mul, the pair it replaces (the same math: its reference is that pair).

With cfg.residual = ADD_NORM (the `-addnorm` presets) the residual is the K2-style pre-norm
stream through the fused op add_rmsnorm (r = bf16(delta + residual); h = rms(r) * w):
  layer 0: residual = embedding, attention input = rmsnorm(embedding);
  every later attention input: h, residual = add_rmsnorm(delta_prev, residual, attn_norm);
  MoE/FFN input: h, residual = add_rmsnorm(attn_out, residual, mlp_norm);
  after the last layer: add_rmsnorm(mlp_out, residual, final_norm) feeds the LM head.
The same weights (attn_norm, mlp_norm, final_norm); the AttnRes weights go unused,
StepState.blocks is empty and the stream is StepState.residual. Attention and FFN are the
same in both modes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness import registry as registry_mod

from .cache import DecodeCache
from .config import ModelConfig, Residual
from .weights import Weights


@dataclass
class StepState:
    """What flows between layers within one decode step."""

    x: torch.Tensor               # embedding [B, H]
    blocks: torch.Tensor          # AttnRes: sealed block sums [B, max_blocks, H]; the first nb are valid
    nb: int                       #   (ADD_NORM: [B, 0, H], nb stays 0)
    zeros: torch.Tensor
    prefix: torch.Tensor          # AttnRes: running sum of the current block
    delta: torch.Tensor           # the previous sublayer's output, not yet added to the stream
    new_lens: torch.Tensor        # cache lengths after this step's token
    residual: torch.Tensor | None = None   # ADD_NORM: the residual stream, bf16(embedding +
                                           #   every sublayer output so far); never written in place


class K3Decoder:
    def __init__(self, cfg: ModelConfig, weights: Weights, registry: registry_mod.Registry | None = None) -> None:
        self.cfg = cfg
        self.w = weights
        self.registry = registry
        self.device = weights["embed"].device

    # ---- op dispatch ----------------------------------------------------------------
    def _run(self, op: str, site: str, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        reg = self.registry or registry_mod.default()
        return reg.run(op, inputs, tp=self.cfg.tp, site=site)

    def _gemm(self, x: torch.Tensor, w: torch.Tensor, shape: str, site: str) -> torch.Tensor:
        reg = self.registry or registry_mod.default()
        return reg.run("skinny_gemm", {"x": x, "weight": w}, tp=self.cfg.tp, site=site, shape=shape)["out"]

    def _gate_up_act(self, h: torch.Tensor, w: torch.Tensor, shape: str, gemm_site: str, act_site: str) -> torch.Tensor:
        """situ_and_mul(bf16(h @ w^T)): gemm_situ_and_mul where its kernel would run, else the gate_up
        GEMM and situ_and_mul (so their own kernels keep running wherever the fused one does not)."""
        reg = self.registry or registry_mod.default()
        fused = reg.run_selected("gemm_situ_and_mul", {"x": h, "weight": w}, tp=self.cfg.tp, site=act_site, shape=shape)
        if fused is not None:
            return fused["out"]
        gu = self._gemm(h, w, shape, gemm_site)
        return self._run("situ_and_mul", act_site, gate_up=gu)["out"]

    def _attn_res(self, site: str, st: "StepState", delta: torch.Tensor, w_res: torch.Tensor,
                  w_norm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, new_prefix) of AttnRes over the st.nb sealed blocks: `blocks` is a view of the
        [B, max_blocks, H] buffer (batch stride max_blocks*H) and the static key names nb."""
        reg = self.registry or registry_mod.default()
        r = reg.run("attn_res", {"prefix": st.prefix, "delta": delta, "blocks": st.blocks[:, :st.nb],
                                 "w_res": w_res, "w_norm": w_norm}, tp=self.cfg.tp, site=site, shape=f"nb{st.nb}")
        return r["out"], r["new_prefix"]

    # ---- one decode step --------------------------------------------------------------
    @torch.no_grad()
    def step(self, tokens: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """tokens int64 [B] (one per row) -> fp32 logits [B, V]; appends to every cache row."""
        st = self.begin(tokens, cache)
        for i in range(self.cfg.n_layers):
            self.layer(i, st, cache)
        return self.finish(st, cache)

    def begin(self, tokens: torch.Tensor, cache: DecodeCache) -> "StepState":
        x = self.w["embed"][tokens]                                       # [B, H] bf16
        n_blocks = self.cfg.max_blocks if self.cfg.residual is Residual.ATTN_RES else 0
        blocks = torch.empty(x.shape[0], n_blocks, self.cfg.hidden, dtype=x.dtype, device=x.device)
        zeros = torch.zeros_like(x)
        return StepState(x, blocks, 0, zeros, zeros, zeros, cache.lens + 1)

    @torch.no_grad()
    def layer(self, i: int, st: "StepState", cache: DecodeCache) -> None:
        """Decoder layer i on the step state (residual bookkeeping, attention, FFN)."""
        cfg, w, p = self.cfg, self.w, f"layers.{i}."
        if cfg.residual is Residual.ADD_NORM:
            return self._layer_add_norm(i, st, cache)
        if i == 0:
            h = self._run("rmsnorm", p + "attn_norm", x=st.x, weight=w[p + "attn_norm"])["out"]
            st.prefix = st.x
        else:
            h, st.prefix = self._attn_res(p + "attn_res", st, st.delta, w[p + "attn_res_w"], w[p + "attn_norm"])
        if i % cfg.attn_res_block == 0:                                   # seal the block
            st.blocks[:, st.nb] = st.prefix
            st.nb += 1
            st.prefix = st.zeros
        a = self._mla(h, i, cache, st.new_lens) if cfg.is_mla(i) else self._kda(h, i, cache)
        h, st.prefix = self._attn_res(p + "mlp_res", st, a, w[p + "mlp_res_w"], w[p + "mlp_norm"])
        st.delta = self._dense(h, i) if cfg.is_dense(i) else self._moe(h, i)

    @torch.no_grad()
    def finish(self, st: "StepState", cache: DecodeCache) -> torch.Tensor:
        if self.cfg.residual is Residual.ADD_NORM:
            assert st.residual is not None          # set by layer 0 (_layer_add_norm)
            h, _ = self._add_norm("final_add_norm", st.delta, st.residual, self.w["final_norm"])
            cache.lens.copy_(st.new_lens)
            return self._lm_head(h)
        h, _ = self._attn_res("final_res", st, st.delta, self.w["final_res_w"], self.w["final_norm"])
        cache.lens.copy_(st.new_lens)
        return self._lm_head(h)

    # ---- K2-style residual (cfg.residual = ADD_NORM) -------------------------------------
    def _layer_add_norm(self, i: int, st: "StepState", cache: DecodeCache) -> None:
        """Pre-norm layer i: st.residual is the residual stream, st.delta the FFN output of the
        previous layer (both bf16)."""
        cfg, w, p = self.cfg, self.w, f"layers.{i}."
        if i == 0:
            h = self._run("rmsnorm", p + "attn_norm", x=st.x, weight=w[p + "attn_norm"])["out"]
            st.residual = st.x
        else:
            assert st.residual is not None
            h, st.residual = self._add_norm(p + "attn_add_norm", st.delta, st.residual, w[p + "attn_norm"])
        a = self._mla(h, i, cache, st.new_lens) if cfg.is_mla(i) else self._kda(h, i, cache)
        h, st.residual = self._add_norm(p + "mlp_add_norm", a, st.residual, w[p + "mlp_norm"])
        st.delta = self._dense(h, i) if cfg.is_dense(i) else self._moe(h, i)

    def _add_norm(self, site: str, delta: torch.Tensor, residual: torch.Tensor,
                  weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms(r) * weight, r) with r = bf16(delta + residual): the fused add_rmsnorm op."""
        r = self._run("add_rmsnorm", site, x=delta, residual=residual, weight=weight)
        return r["out"], r["residual_out"]

    def _lm_head(self, h: torch.Tensor) -> torch.Tensor:
        head = self.w["lm_head"]
        if head.numel() <= 1 << 24:                                       # small vocab: fp32 logits
            return h.float() @ head.float().t()
        return (h @ head.t()).float()                                     # bf16 GEMM, fp32 accumulate

    # ---- KDA ---------------------------------------------------------------------------
    def _kda(self, h: torch.Tensor, i: int, cache: DecodeCache) -> torch.Tensor:
        cfg, w, p = self.cfg, self.w, f"layers.{i}.kda."
        inner, nh = cfg.kda_inner, cfg.kda_heads
        proj = self._gemm(h, w[p + "in_proj"], "kda_in_proj", p + "in_proj")
        qkv, g_out, f_a, b = torch.split(proj[:, :4 * inner + cfg.f_rank + nh], [3 * inner, inner, cfg.f_rank, nh], dim=-1)
        f = self._gemm(f_a.contiguous(), w[p + "f_b"], "kda_f_b", p + "f_b")
        conv, state = cache.conv[i], cache.state[i]
        out = self._run("kda_decode", p + "decode", qkv=qkv.contiguous(), conv_state=conv,
                        conv_weight=w[p + "conv"], f=f, b=b.contiguous(), g_out=g_out.contiguous(),
                        A_log=w[p + "A_log"], dt_bias=w[p + "dt_bias"], w_norm=w[p + "o_norm"], state=state)
        _write_back(conv, out["conv_state"])
        _write_back(state, out["state"])
        return self._gemm(out["o"], w[p + "o_proj"], "kda_o_proj", p + "o_proj")

    # ---- MLA (absorbed, NoPE, sigmoid output gate) ------------------------------------
    def _mla(self, h: torch.Tensor, i: int, cache: DecodeCache, new_lens: torch.Tensor) -> torch.Tensor:
        cfg, w, p = self.cfg, self.w, f"layers.{i}.mla."
        bsz, nh = h.shape[0], cfg.mla_heads
        qkv = self._gemm(h, w[p + "qkv_a"], "mla_qkv_a", p + "qkv_a")
        q_c, kv_c, k_pe = torch.split(qkv, [cfg.q_lora, cfg.kv_lora, cfg.qk_rope], dim=-1)
        q_c = self._run("rmsnorm", p + "q_a_norm", x=q_c.contiguous(), weight=w[p + "q_a_norm"])["out"]
        kv_c = self._run("rmsnorm", p + "kv_a_norm", x=kv_c.contiguous(), weight=w[p + "kv_a_norm"])["out"]
        q = self._gemm(q_c, w[p + "q_b"], "mla_q_b", p + "q_b").view(bsz, nh, cfg.qk_head)
        q_nope, q_pe = q[..., :cfg.qk_nope], q[..., cfg.qk_nope:]
        # W_UK absorb: q_lat[h] = q_nope[h] @ W_UK[h]   [B, h, kv_lora]
        q_lat = torch.einsum("bhn,hnl->bhl", q_nope.float(), w[p + "w_uk"].float()).to(torch.bfloat16)
        kv = cache.kv[i]
        rows = torch.arange(bsz, device=h.device)
        kv.index_put_((rows, cache.lens.long()), torch.cat([kv_c, k_pe], dim=-1))  # no host sync: graph-safe
        out = self._run("mla_decode", p + "decode", q_lat=q_lat, q_pe=q_pe.contiguous(), kv_cache=kv,
                        cache_lens=new_lens)
        # W_UV: o[h] = lat[h] @ W_UV[h]; then the sigmoid output gate of K3
        o = torch.einsum("bhl,hlv->bhv", out["lat"].float(), w[p + "w_uv"].float()).reshape(bsz, -1)
        gate = self._gemm(h, w[p + "g_proj"], "mla_g_proj", p + "g_proj")
        o = (o * torch.sigmoid(gate.float())).to(torch.bfloat16)
        return self._gemm(o, w[p + "o_proj"], "mla_o_proj", p + "o_proj")

    # ---- FFN -----------------------------------------------------------------------------
    def _dense(self, h: torch.Tensor, i: int) -> torch.Tensor:
        p = f"layers.{i}.mlp."
        a = self._gate_up_act(h, self.w[p + "gate_up"], "dense_gate_up", p + "gate_up", p + "act")
        return self._gemm(a, self.w[p + "down"], "dense_down", p + "down")

    def _moe(self, h: torch.Tensor, i: int) -> torch.Tensor:
        w, p = self.w, f"layers.{i}.moe."
        r = self._run("moe_router", p + "router", x=h, router_weight=w[p + "router"], e_score_bias=w[p + "bias"])
        lat_in = self._gemm(h, w[p + "down"], "latent_down", p + "down")
        lat = self._run("moe_experts", p + "experts", lat_in=lat_in, topk_ids=r["topk_ids"],
                        topk_weights=r["topk_weights"], w13=w[p + "w13"], w13_scale=w[p + "w13_scale"],
                        w2=w[p + "w2"], w2_scale=w[p + "w2_scale"])["out"]
        # (TP: the all-reduce of [latent, shared] goes here; one rank has nothing to reduce)
        lat = self._run("rmsnorm", p + "latent_norm", x=lat, weight=w[p + "latent_norm"])["out"]
        up = self._gemm(lat, w[p + "up"], "latent_up", p + "up")
        a = self._gate_up_act(h, w[p + "shared_gate_up"], "shared_gate_up", p + "shared_gate_up", p + "shared_act")
        shared = self._gemm(a, w[p + "shared_down"], "shared_down", p + "shared_down")
        return (up.float() + shared.float()).to(torch.bfloat16)

    # ---- prefill -----------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, prompts: list[list[int]], cache: DecodeCache) -> torch.Tensor:
        """Feed every row its prompt (the slow reference-path prefill: one decode step per
        token). Rows advance in lockstep; at step t the rows whose prompt is longer than t
        run, as contiguous row ranges of the cache (one range when prompts are sorted by
        decreasing length). Returns fp32 logits [B, V] after each row's last prompt token."""
        if len(prompts) != cache.batch:
            raise ValueError(f"{len(prompts)} prompts for a cache of {cache.batch} rows")
        for b, ids in enumerate(prompts):
            if not ids:
                raise ValueError(f"prompt {b} is empty")
            if int(cache.lens[b]) + len(ids) > cache.max_len:
                raise ValueError(f"prompt {b} ({len(ids)} tokens) does not fit the cache ({cache.max_len})")
        last = torch.empty(cache.batch, self.cfg.vocab, dtype=torch.float32, device=self.device)
        for t in range(max(len(p) for p in prompts)):
            active = [len(p) > t for p in prompts]
            for start, stop in _runs(active):
                toks = torch.tensor([prompts[b][t] for b in range(start, stop)], dtype=torch.long, device=self.device)
                logits = self.step(toks, cache.rows(start, stop))
                for b in range(start, stop):
                    if t == len(prompts[b]) - 1:
                        last[b] = logits[b - start]
        return last


def _runs(mask: list[bool]) -> list[tuple[int, int]]:
    """Maximal [start, stop) ranges of True."""
    out, start = [], None
    for i, m in enumerate(mask + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def _write_back(buf: torch.Tensor, new: torch.Tensor) -> None:
    """A kernel updates STATE in place (same tensor); the reference returns a new one."""
    if new is not buf:
        buf.copy_(new)
