"""Decode caches: the MLA latent KV cache and the KDA conv + recurrent state, per layer.

One row per sequence. Sequences of different lengths share a batch: `lens[b]` counts the
tokens row b holds (K3 is NoPE, so a token's position is only its cache slot).
  MLA layer: kv [B, max_len, kv_lora + qk_rope] bf16 (one 576-wide latent row per token)
  KDA layer: conv [B, 3*inner, conv_kernel - 1] bf16 (the last taps of q|k|v before the conv),
             state [B, h, head_dim(V), head_dim(K)] fp32 or bf16
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import ModelConfig

STATE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class DecodeCache:
    lens: torch.Tensor                                   # int32 [B]
    max_len: int
    kv: dict[int, torch.Tensor] = field(default_factory=dict)
    conv: dict[int, torch.Tensor] = field(default_factory=dict)
    state: dict[int, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def allocate(cls, cfg: ModelConfig, batch: int, max_len: int, device: str | torch.device = "cpu",
                 state_dtype: str = "fp32") -> "DecodeCache":
        dev = torch.device(device)
        c = cls(lens=torch.zeros(batch, dtype=torch.int32, device=dev), max_len=max_len)
        for i in range(cfg.n_layers):
            if cfg.is_mla(i):
                c.kv[i] = torch.zeros(batch, max_len, cfg.kv_width, dtype=torch.bfloat16, device=dev)
            else:
                c.conv[i] = torch.zeros(batch, 3 * cfg.kda_inner, cfg.conv_kernel - 1, dtype=torch.bfloat16, device=dev)
                c.state[i] = torch.zeros(batch, cfg.kda_heads, cfg.kda_head_dim, cfg.kda_head_dim,
                                         dtype=STATE_DTYPES[state_dtype], device=dev)
        return c

    @property
    def batch(self) -> int:
        return int(self.lens.shape[0])

    def rows(self, start: int, stop: int) -> "DecodeCache":
        """A view of rows start..stop-1: writes through it land in this cache."""
        return DecodeCache(self.lens[start:stop], self.max_len,
                           {k: v[start:stop] for k, v in self.kv.items()},
                           {k: v[start:stop] for k, v in self.conv.items()},
                           {k: v[start:stop] for k, v in self.state.items()})

    def clone(self) -> "DecodeCache":
        return DecodeCache(self.lens.clone(), self.max_len, {k: v.clone() for k, v in self.kv.items()},
                           {k: v.clone() for k, v in self.conv.items()}, {k: v.clone() for k, v in self.state.items()})

    def copy_from(self, other: "DecodeCache") -> None:
        """Overwrite this cache's contents in place (its buffers keep their addresses)."""
        self.lens.copy_(other.lens)
        for mine, theirs in ((self.kv, other.kv), (self.conv, other.conv), (self.state, other.state)):
            for k, v in mine.items():
                v.copy_(theirs[k])

    def nbytes(self) -> int:
        ts = list(self.kv.values()) + list(self.conv.values()) + list(self.state.values())
        return sum(t.numel() * t.element_size() for t in ts)
