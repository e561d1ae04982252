"""Pure-PyTorch emulation of the add_rmsnorm (rowreg) and attn_res (rowmix) kernels' work split,
at each human point's THREADS / VEC: thread t owns the VEC-wide vectors k*THREADS + t; sums go
thread -> warp (32 threads) -> block; attn_res factors logit_j = rsqrt(mean(V_j^2) + eps) * (V_j . w_res)
and takes the softmax as exp2((l - max) * log2 e) / sum, over NB + 1 sources (NB = 1, 3, 8: the static key
shape="nb<NB>"). Checked against the op reference with the op's own tolerances (harness.compare), so a
wrong ownership map or factorisation fails here on a CPU."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point

ROOT = Path(__file__).resolve().parents[2]
H, EPS = 7168, 1e-5


def _points(op: str, family: str | None = None) -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p["params"] for p in pts if p["op"] == op and family in (None, p["family"])]


def _owner_index(threads: int, vec: int) -> torch.Tensor:
    """[THREADS, NV, VEC] column index owned by (thread, vector k, element)."""
    nv = H // (threads * vec)
    t = torch.arange(threads)[:, None, None]
    k = torch.arange(nv)[None, :, None]
    e = torch.arange(vec)[None, None, :]
    return (k * threads + t) * vec + e


def _block_sum(per_col: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim (H) the kernel's way: per thread, then per warp, then over warps."""
    per_thread = per_col[..., idx].sum((-1, -2))                     # [..., THREADS]
    per_warp = per_thread.unflatten(-1, (-1, 32)).sum(-1)            # [..., NWARPS]
    return per_warp.sum(-1)


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


@pytest.mark.parametrize("params", _points("add_rmsnorm", "rowreg"), ids=lambda p: f"t{p['threads']}v{p['vec']}")
def test_add_rmsnorm_emulation(params):
    idx = _owner_index(params["threads"], params["vec"])
    assert torch.equal(idx.flatten().sort().values, torch.arange(H)), "every column owned exactly once"
    defn = reference_impls.get("add_rmsnorm")
    point = Point(batch=3, tp=8)
    inp = defn.make_inputs(point, torch.Generator().manual_seed(7))
    r = _bf16(inp["x"].float() + inp["residual"].float())              # the rounded sum, squared
    rstd = torch.rsqrt(_block_sum(r * r, idx) / H + EPS)[:, None]
    got = {"out": (r * rstd * inp["weight"].float()).to(torch.bfloat16), "residual_out": r.to(torch.bfloat16)}
    res = compare(defn, got, defn.reference(**inp), inp)
    assert res.ok, res.summary()


@pytest.mark.parametrize("nb", [1, 3, 8])
@pytest.mark.parametrize("params", _points("attn_res", "rowmix"), ids=lambda p: f"t{p['threads']}v{p['vec']}")
def test_attn_res_emulation(params, nb):
    idx = _owner_index(params["threads"], params["vec"])
    assert torch.equal(idx.flatten().sort().values, torch.arange(H)), "every column owned exactly once"
    defn = reference_impls.get("attn_res")
    point = Point(batch=3, tp=8, shape=f"nb{nb}")           # NB = the kernel's compile-time block count
    inp = defn.make_inputs(point, torch.Generator().manual_seed(11))
    assert inp["blocks"].shape[1] == nb
    new_prefix = _bf16(inp["prefix"].float() + inp["delta"].float())
    v = torch.cat([inp["blocks"].float(), new_prefix[:, None]], dim=1)            # [B, NS, H]
    ss = _block_sum(v * v, idx)                                                  # [B, NS]
    dt = _block_sum(v * inp["w_res"].float(), idx)
    logit = dt * torch.rsqrt(ss / H + EPS)
    e = torch.exp2((logit - logit.amax(-1, keepdim=True)) * (1.0 / math.log(2.0)))
    p = e / e.sum(-1, keepdim=True)
    mixed = (p[..., None] * v).sum(1)
    rstd = torch.rsqrt(_block_sum(mixed * mixed, idx) / H + EPS)[:, None]
    got = {"out": (mixed * rstd * inp["w_norm"].float()).to(torch.bfloat16),
           "new_prefix": new_prefix.to(torch.bfloat16)}
    res = compare(defn, got, defn.reference(**inp), inp)
    assert res.ok, res.summary()
