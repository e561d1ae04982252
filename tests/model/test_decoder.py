"""The tiny K3 decoder: determinism, batching rows of different lengths, the layer
pattern, and per-rank widths that match the op catalogue."""
from __future__ import annotations

import torch

from harness.model import DecodeCache, K3Decoder, get_config, init_weights
from harness.registry import Outcome, Reason, Registry

CFG = get_config("tiny")
PROMPTS = [[257, 72, 101, 108, 108, 111], [257, 123, 34], [257, 65, 66, 67, 68]]


def _decode(weights, prompts, steps: int, reg: Registry | None = None):
    model = K3Decoder(CFG, weights, reg or Registry())
    cache = DecodeCache.allocate(CFG, len(prompts), max(map(len, prompts)) + steps + 1)
    logits = model.prefill(prompts, cache)
    out, toks = [logits], []
    for _ in range(steps):
        t = logits.argmax(-1)
        toks.append(t)
        logits = model.step(t, cache)
        out.append(logits)
    return torch.stack(out), (torch.stack(toks) if toks else None), cache


def test_tiny_decode_is_deterministic_and_seed_dependent(tiny_weights):
    a, ta, cache = _decode(tiny_weights, PROMPTS, 3)
    b, tb, _ = _decode(init_weights(CFG, seed=0), PROMPTS, 3)
    c, _, _ = _decode(init_weights(CFG, seed=1), PROMPTS, 3)
    assert torch.equal(a, b) and torch.equal(ta, tb)
    assert not torch.allclose(a, c)
    assert torch.isfinite(a).all() and 0.3 < float(a.std()) < 10
    assert cache.lens.tolist() == [len(p) + 3 for p in PROMPTS]


def test_batched_rows_of_different_lengths_match_single_rows(tiny_weights):
    batched, _, _ = _decode(tiny_weights, PROMPTS, 2)
    for b, p in enumerate(PROMPTS):
        single, _, _ = _decode(tiny_weights, [p], 0)
        torch.testing.assert_close(batched[0, b], single[0, 0], rtol=2e-2, atol=2e-2)


def test_every_op_goes_through_the_registry(tiny_weights):
    reg = Registry()
    _decode(tiny_weights, [[257, 1]], 1, reg)
    ops = {k.op for k in reg.counters()}
    assert ops == {"attn_res", "kda_decode", "mla_decode", "moe_experts", "moe_router", "rmsnorm",
                   "situ_and_mul", "skinny_gemm"}
    assert all(k.outcome is Outcome.FALLBACK and k.reason is Reason.NO_KERNEL for k in reg.counters())


def test_k3_layer_pattern():
    cfg = get_config("k3-tp8-rank", 93)
    mla = [i + 1 for i in range(93) if cfg.is_mla(i)]
    assert mla == list(range(4, 93, 4)) + [93] and len(mla) == 24
    assert [i for i in range(93) if cfg.is_dense(i)] == [0]
    tiny = get_config("tiny")
    assert [tiny.is_mla(i) for i in range(tiny.n_layers)] == [False, False, False, True, True]


def test_rank_configs_match_catalogue_gemm_shapes():
    from reference_impls.skinny_gemm import SHAPES

    for tp in (8, 16):
        cfg = get_config(f"k3-tp{tp}-rank")
        ours = {
            "kda_in_proj": (cfg.hidden, cfg.kda_in_proj_rows), "kda_f_b": (cfg.f_rank, cfg.kda_inner),
            "kda_o_proj": (cfg.kda_inner, cfg.hidden), "mla_qkv_a": (cfg.hidden, cfg.q_lora + cfg.kv_width),
            "mla_q_b": (cfg.q_lora, cfg.mla_heads * cfg.qk_head), "mla_g_proj": (cfg.hidden, cfg.mla_heads * cfg.v_head),
            "mla_o_proj": (cfg.mla_heads * cfg.v_head, cfg.hidden), "latent_down": (cfg.hidden, cfg.latent),
            "shared_gate_up": (cfg.hidden, 2 * cfg.shared_inter), "shared_down": (cfg.shared_inter, cfg.hidden),
            "latent_up": (cfg.latent, cfg.hidden), "dense_gate_up": (cfg.hidden, 2 * cfg.dense_inter),
            "dense_down": (cfg.dense_inter, cfg.hidden),
        }
        assert ours == SHAPES[tp]


def test_kernel_in_scope_changes_the_decode_and_trace_shows_it(tiny_weights):
    """A test-only "kernel" for rmsnorm (scope: cpu, tp 1) that scales its output: the
    decode path must use it (kernel counts > 0) and the logits must move."""
    from harness.registry import KernelScope
    import reference_impls

    ref = reference_impls.get("rmsnorm").reference

    def scaled(x, weight, out):
        out.copy_(ref(x, weight)["out"] * 1.5)

    reg = Registry(check_shapes=False)
    reg.register("rmsnorm", KernelScope(archs=("cpu",), tp=(1,), batch=(1, 64)), scaled)
    on, _, _ = _decode(tiny_weights, PROMPTS[:1], 1, reg)
    off, _, _ = _decode(tiny_weights, PROMPTS[:1], 1)
    assert reg.counters()[next(k for k in reg.counters() if k.op == "rmsnorm")] > 0
    assert any(k.op == "rmsnorm" and k.outcome is Outcome.KERNEL for k in reg.counters())
    assert not torch.allclose(on, off)
