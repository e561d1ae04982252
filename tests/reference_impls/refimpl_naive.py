"""Independent float64 / explicit-loop versions of the catalogue math, written from
docs/kimi_k3_decode_ops.md without importing the reference modules' code."""
from __future__ import annotations

import math

import torch

EPS = 1e-5


def rms64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS)


def situ64(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    g, u = g.double(), u.double()
    return 4.0 * torch.tanh(g / 4.0) / (1.0 + torch.exp(-g)) * 25.0 * torch.tanh(u / 25.0)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def e2m1_value(code: int) -> float:
    """OCP MX e2m1: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; e=0 is subnormal."""
    sign = -1.0 if code & 8 else 1.0
    e, m = (code >> 1) & 3, code & 1
    mag = m * 0.5 if e == 0 else (1.0 + m / 2.0) * 2.0 ** (e - 1)
    return sign * mag


def mxfp4_matrix(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Element-by-element decode of one [N, K/2] packed matrix, float64, low nibble first."""
    n, half = packed.shape
    out = torch.empty(n, 2 * half, dtype=torch.float64)
    for r in range(n):
        for i in range(half):
            byte = int(packed[r, i])
            for j, code in enumerate((byte & 0xF, byte >> 4)):
                col = 2 * i + j
                out[r, col] = e2m1_value(code) * 2.0 ** (int(scale[r, col // 32]) - 127)
    return out


def kda_step(inp: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Token by token, head by head, float64."""
    qkv, cs, cw = inp["qkv"].double(), inp["conv_state"].double(), inp["conv_weight"].double()
    bsz, h = inp["b"].shape
    d = 128
    o = torch.empty(bsz, h * d, dtype=torch.float64)
    s_new = torch.empty(inp["state"].shape, dtype=torch.float64)
    for b in range(bsz):
        acc = cs[b, :, 0] * cw[:, 0] + cs[b, :, 1] * cw[:, 1] + cs[b, :, 2] * cw[:, 2] + qkv[b] * cw[:, 3]
        y = acc / (1.0 + torch.exp(-acc))
        for hh in range(h):
            q = y[hh * d:(hh + 1) * d]
            k = y[h * d + hh * d: h * d + (hh + 1) * d]
            v = y[2 * h * d + hh * d: 2 * h * d + (hh + 1) * d]
            q = q / math.sqrt(float((q * q).sum()) + 1e-6) / math.sqrt(d)
            k = k / math.sqrt(float((k * k).sum()) + 1e-6)
            rate = math.exp(float(inp["A_log"][hh]))
            fch = inp["f"][b, hh * d:(hh + 1) * d].double() + inp["dt_bias"][hh * d:(hh + 1) * d].double()
            decay = torch.exp(-5.0 / (1.0 + torch.exp(-rate * fch)))
            beta = sigmoid(float(inp["b"][b, hh]))
            S = inp["state"][b, hh].double().clone()
            for kk in range(d):
                S[:, kk] *= decay[kk]
            u = beta * (v - S @ k)
            S += torch.outer(u, k)
            ov = S @ q
            gate = 1.0 / (1.0 + torch.exp(-inp["g_out"][b, hh * d:(hh + 1) * d].double()))
            o[b, hh * d:(hh + 1) * d] = rms64(ov) * inp["w_norm"].double() * gate
            s_new[b, hh] = S
    return {"o": o, "state": s_new, "conv_state": torch.cat([cs[:, :, 1:], qkv[:, :, None]], -1)}


def mla(inp: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain softmax over the valid rows, float64, no splits."""
    bsz, h, r = inp["q_lat"].shape
    lat = torch.empty(bsz, h, r, dtype=torch.float64)
    lse = torch.empty(bsz, h, dtype=torch.float64)
    for b in range(bsz):
        n = int(inp["cache_lens"][b])
        c = inp["kv_cache"][b, :n].double()
        for hh in range(h):
            s = (c[:, :512] @ inp["q_lat"][b, hh].double() + c[:, 512:] @ inp["q_pe"][b, hh].double()) / math.sqrt(192)
            m = float(s.max())
            e = torch.exp(s - m)
            lat[b, hh] = (e[:, None] * c[:, :512]).sum(0) / e.sum()
            lse[b, hh] = m + math.log(float(e.sum()))
    return lat, lse


def attn_res(prefix, delta, blocks, w_res, w_norm) -> tuple[torch.Tensor, torch.Tensor]:
    newp = (prefix.double() + delta.double()).to(torch.bfloat16).double()
    srcs = [blocks[:, j].double() for j in range(blocks.shape[1])] + [newp]
    logits = torch.stack([(rms64(v) * w_res.double()).sum(-1) for v in srcs], -1)
    p = torch.exp(logits - logits.max(-1, keepdim=True).values)
    p = p / p.sum(-1, keepdim=True)
    mixed = sum(p[:, j:j + 1] * srcs[j] for j in range(len(srcs)))
    return rms64(mixed) * w_norm.double(), newp
