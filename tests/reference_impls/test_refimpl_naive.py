"""Every catalogue reference against the independent computations in naive.py, at small
sizes. Tolerances here bound the reference's fp32 error plus one bf16 rounding of outputs."""
from __future__ import annotations

import pytest
import torch

import reference_impls
from harness.opdef import Point
from reference_impls import mxfp4

import refimpl_naive as naive


def _close_bf16(got: torch.Tensor, want: torch.Tensor, rtol: float = 8e-3, atol: float = 1e-4) -> None:
    """bf16 output vs a float64 value: within half an ulp plus fp32 slack."""
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


def _inputs(op: str, point: Point, seed: int = 0) -> tuple:
    d = reference_impls.get(op)
    inp = d.make_inputs(point, torch.Generator().manual_seed(seed), "cpu")
    return d, inp, d.run_reference(inp)


@pytest.mark.parametrize("tp", [8, 16])
def test_rmsnorm(tp: int) -> None:
    _, inp, out = _inputs("rmsnorm", Point(3, tp))
    _close_bf16(out["out"], naive.rms64(inp["x"]) * inp["weight"].double())


def test_add_rmsnorm() -> None:
    _, inp, out = _inputs("add_rmsnorm", Point(3))
    r = (inp["x"].double() + inp["residual"].double()).to(torch.bfloat16)
    assert torch.equal(out["residual_out"], r)
    _close_bf16(out["out"], naive.rms64(r) * inp["weight"].double())


@pytest.mark.parametrize("tp", [8, 16])
def test_situ_and_mul(tp: int) -> None:
    _, inp, out = _inputs("situ_and_mul", Point(4, tp))
    i = inp["gate_up"].shape[1] // 2
    assert out["out"].shape[1] == 2 * 3072 // tp
    _close_bf16(out["out"], naive.situ64(inp["gate_up"][:, :i], inp["gate_up"][:, i:]))


def test_silu_and_mul() -> None:
    _, inp, out = _inputs("silu_and_mul", Point(4))
    g, u = inp["gate_up"][:, :768].double(), inp["gate_up"][:, 768:].double()
    _close_bf16(out["out"], g / (1 + torch.exp(-g)) * u)


def test_attn_res_fixed_and_variable_blocks() -> None:
    d, inp, out = _inputs("attn_res", Point(2))
    want_out, want_prefix = naive.attn_res(inp["prefix"], inp["delta"], inp["blocks"], inp["w_res"], inp["w_norm"])
    assert torch.equal(out["new_prefix"], want_prefix.to(torch.bfloat16))
    _close_bf16(out["out"], want_out)
    from reference_impls.attn_res import attn_res_mix

    for nb in (1, 3):                     # the decoder's growing block list
        got, _ = attn_res_mix(inp["prefix"], inp["delta"], list(inp["blocks"][:, :nb].unbind(1)), inp["w_res"], inp["w_norm"])
        want, _ = naive.attn_res(inp["prefix"], inp["delta"], inp["blocks"][:, :nb], inp["w_res"], inp["w_norm"])
        _close_bf16(got, want)


@pytest.mark.parametrize("shape,nb", [("nb1", 1), ("nb3", 3)])
def test_attn_res_named_shape(shape: str, nb: int) -> None:
    """A non-default block count: the inputs carry nb blocks and the reference matches naive."""
    d, inp, out = _inputs("attn_res", Point(2, shape=shape), seed=3)
    assert tuple(inp["blocks"].shape) == (2, nb, 7168) == d.shapes(Point(2, shape=shape))["blocks"]
    want_out, want_prefix = naive.attn_res(inp["prefix"], inp["delta"], inp["blocks"], inp["w_res"], inp["w_norm"])
    assert torch.equal(out["new_prefix"], want_prefix.to(torch.bfloat16))
    _close_bf16(out["out"], want_out)


def test_attn_res_shape_names() -> None:
    d = reference_impls.get("attn_res")
    assert d.extra["shape_names"] == tuple(f"nb{n}" for n in range(1, 9)) and d.extra["default_shape"] == "nb8"
    assert d.shapes(Point(1))["blocks"] == d.shapes(Point(1, shape="nb8"))["blocks"] == (1, 8, 7168)
    assert d.min_bytes(Point(4, shape="nb1")) < d.min_bytes(Point(4, shape="nb8")) == d.min_bytes(Point(4))
    with pytest.raises(ValueError, match="nb1, nb2"):
        d.shapes(Point(1, shape="nb9"))


@pytest.mark.parametrize("shape", ["kda_f_b", "mla_q_b", "kda_in_proj"])
def test_skinny_gemm(shape: str) -> None:
    d = reference_impls.get("skinny_gemm")
    pt = Point(2, 16, shape=shape)
    inp = d.make_inputs(pt, torch.Generator().manual_seed(1), "cpu")
    out = d.run_reference(inp)["out"]
    x, w = inp["x"].double(), inp["weight"].double()
    want = torch.tensor([[sum(float(x[b, k]) * float(w[n, k]) for k in range(x.shape[1])) for n in range(0, w.shape[0], 97)]
                         for b in range(2)], dtype=torch.float64) if shape == "kda_f_b" else x @ w.t()
    got = out[:, ::97] if shape == "kda_f_b" else out
    _close_bf16(got, want, atol=1e-3)


@pytest.mark.parametrize("tp,shape", [(8, ""), (16, "shared_gate_up"), (16, "dense_gate_up")])
def test_gemm_situ_and_mul(tp: int, shape: str) -> None:
    """float64 GEMM, gate_up rounded to bf16 as the unfused pair stores it, then SiTU in float64;
    the weight's first I rows are the gate."""
    d, inp, out = _inputs("gemm_situ_and_mul", Point(2, tp, shape=shape), seed=3)
    x, w = inp["x"].double(), inp["weight"].double()
    i = w.shape[0] // 2
    assert out["out"].shape == (2, i) and i == (2 * 3072 if shape != "dense_gate_up" else 33792) // tp
    gate_up = (x @ w.t()).to(torch.bfloat16)
    _close_bf16(out["out"], naive.situ64(gate_up[:, :i], gate_up[:, i:]), atol=1e-3)
    swapped = naive.situ64(gate_up[:, i:], gate_up[:, :i])
    assert not torch.allclose(out["out"].double(), swapped, rtol=0.1, atol=0.1)   # the halves are not symmetric


def test_oproj_allreduce_residual_ranks() -> None:
    from reference_impls.oproj_allreduce_residual import reference_ranks

    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(2, 768, generator=g).bfloat16() for _ in range(3)]
    ws = [(torch.randn(7168, 768, generator=g) / 100).bfloat16() for _ in range(3)]
    res = torch.randn(2, 7168, generator=g).bfloat16()
    want = res.double() + sum(x.double() @ w.double().t() for x, w in zip(xs, ws))
    _close_bf16(reference_ranks(xs, ws, res), want, atol=1e-3)
    d, inp, out = _inputs("oproj_allreduce_residual", Point(2, 16))
    _close_bf16(out["out"], inp["residual"].double() + inp["x"].double() @ inp["w_o"].double().t(), atol=1e-3)


@pytest.mark.parametrize("state_dtype", ["fp32", "bf16"])
def test_kda_decode(state_dtype: str) -> None:
    d, inp, out = _inputs("kda_decode", Point(2, 16, state_dtype=state_dtype))
    want = naive.kda_step(inp)
    assert torch.equal(out["conv_state"], want["conv_state"].to(torch.bfloat16))
    assert out["state"].dtype == inp["state"].dtype
    tol = 1e-5 if state_dtype == "fp32" else 8e-3
    torch.testing.assert_close(out["state"].double(), want["state"], rtol=tol, atol=tol)
    _close_bf16(out["o"], want["o"], atol=1e-3)
    assert not torch.equal(out["state"], inp["state"])        # the input buffer is not mutated...
    assert torch.equal(inp["state"], d.make_inputs(Point(2, 16, state_dtype=state_dtype),
                                                   torch.Generator().manual_seed(0), "cpu")["state"])


def test_mla_decode_splits_and_lengths() -> None:
    from reference_impls.mla_decode import reference

    d, inp, out = _inputs("mla_decode", Point(5, 16, context=37))
    lens = sorted(inp["cache_lens"].tolist())
    assert lens[-1] == 37 and lens[0] < 37                    # lengths vary, the longest fills L
    lat, lse = naive.mla(inp)
    _close_bf16(out["lat"], lat, atol=1e-3)
    torch.testing.assert_close(out["lse"].double(), lse, rtol=1e-5, atol=1e-5)
    for splits in (1, 3, 7, 64):                              # 64 > L: empty splits
        o = reference(**inp, num_splits=splits)
        torch.testing.assert_close(o["lse"].double(), lse, rtol=1e-5, atol=1e-5)
        _close_bf16(o["lat"], lat, atol=1e-3)
    # rows past cache_lens never count: poisoning them changes nothing
    poisoned = dict(inp, kv_cache=inp["kv_cache"].clone())
    for b, n in enumerate(inp["cache_lens"].tolist()):
        poisoned["kv_cache"][b, n:] = 1e4
    assert torch.equal(d.run_reference(poisoned)["lat"], out["lat"])


def test_moe_experts_small_dims() -> None:
    """The reference on 6 experts of I=64, LAT=96, against element-wise decode and float64 math."""
    from reference_impls.moe_experts import reference

    g = torch.Generator().manual_seed(5)
    e, i, lat, b, k = 6, 64, 96, 3, 4
    w13, w13s = mxfp4.random_weights((e, 2 * i), lat, g, scale_exp=-4)
    w2, w2s = mxfp4.random_weights((e, lat), i, g, scale_exp=-3)
    x = torch.randn(b, lat, generator=g).bfloat16()
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(b)]).int()
    wts = torch.rand(b, k, generator=g)
    got = reference(x, ids, wts, w13, w13s, w2, w2s)["out"]
    w13_64 = {ex: naive.mxfp4_matrix(w13[ex], w13s[ex]) for ex in ids.unique().tolist()}
    w2_64 = {ex: naive.mxfp4_matrix(w2[ex], w2s[ex]) for ex in ids.unique().tolist()}
    want = torch.zeros(b, lat, dtype=torch.float64)
    for r in range(b):
        for s in range(k):
            ex = int(ids[r, s])
            h = w13_64[ex] @ x[r].double()
            a = naive.situ64(h[:i], h[i:])
            want[r] += float(wts[r, s]) * (w2_64[ex] @ a)
    _close_bf16(got, want, atol=1e-3)


@pytest.mark.parametrize("rows_per_chunk", [1, 4, 7, 64])
def test_moe_experts_per_slot_form_matches_per_expert_form(rows_per_chunk: int):
    """The CUDA-graph-safe chunked reference computes the same sum as the per-expert one, with
    one (token, slot) pair per chunk, chunks that split a token's slots (4, 7 of k=3) and a
    ragged last chunk (15 pairs), and everything in one chunk."""
    import torch

    from reference_impls import moe_experts, mxfp4

    gen = torch.Generator().manual_seed(3)
    b, e, k, lat, inter = 5, 6, 3, 64, 32
    ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(b)]).to(torch.int32)
    ids[1] = ids[0]                                       # two tokens share all experts
    w = torch.rand(b, k, generator=gen)
    w13, w13s = mxfp4.random_weights((e, 2 * inter), lat, gen, scale_exp=-4)
    w2, w2s = mxfp4.random_weights((e, lat), inter, gen, scale_exp=-4)
    x = torch.randn(b, lat, generator=gen).to(torch.bfloat16)
    a = moe_experts.reference(x, ids, w, w13, w13s, w2, w2s)["out"].float()
    p = moe_experts.reference_per_slot(x, ids, w, w13, w13s, w2, w2s, rows_per_chunk=rows_per_chunk)["out"].float()
    assert torch.allclose(a, p, rtol=1e-2, atol=1e-3), (a - p).abs().max()
    assert a.abs().sum() > 0
