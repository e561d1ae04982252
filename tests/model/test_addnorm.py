"""The K2-style residual (cfg.residual = ADD_NORM, the -addnorm presets): the decode path calls
add_rmsnorm through the registry, its residual bookkeeping matches a hand computation, and
the default (AttnRes) path never calls it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.errors import UserError
from harness.model import PRESETS, DecodeCache, K3Decoder, Residual, get_config, init_weights
from harness.model.config import candidate_gate_model_config, gate_model_config, gate_model_config_for
from harness.registry import KernelScope, Outcome, Reason, Registry
from graph_checks import assert_graph_step_matches_eager

CFG = get_config("tiny-addnorm")
CPU_TP1 = KernelScope(archs=("cpu",), tp=(1,), batch=(1, 64), dtypes=("bf16",))


@pytest.fixture(scope="module")
def addnorm_weights():
    return init_weights(CFG, seed=0)


def _counts(reg: Registry, op: str, outcome: Outcome | None = None) -> int:
    return sum(n for k, n in reg.counters().items() if k.op == op and (outcome is None or k.outcome is outcome))


def _reference(op: str, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
    import reference_impls

    return reference_impls.get(op).run_reference(inputs)


# ---- configs -------------------------------------------------------------------------------
def test_addnorm_presets_are_the_same_widths_with_the_k2_residual():
    for base in ("tiny", "k3-tp8-rank", "k3-tp16-rank"):
        plain, add = get_config(base), get_config(base + "-addnorm")
        assert base + "-addnorm" in PRESETS
        assert plain.residual is Residual.ATTN_RES and add.residual is Residual.ADD_NORM
        assert add.name == base + "-addnorm" and add.is_k3_rank == plain.is_k3_rank
        assert (add.hidden, add.tp, add.n_layers, add.vocab) == (plain.hidden, plain.tp, plain.n_layers, plain.vocab)
    assert get_config("k3-tp8-rank-addnorm").is_k3_rank and get_config("k3-tp16-rank-addnorm").is_k3_rank
    assert get_config("k3-tp8-rank-addnorm", 3).n_layers == 3 and get_config("tiny-addnorm", 2).n_layers == 2
    with pytest.raises(UserError, match="unknown model config"):
        get_config("tiny-addnorm-x")
    with pytest.raises(UserError):
        get_config("tiny-addnorm", 0)
    assert gate_model_config("add_rmsnorm") == "k3-tp8-rank-addnorm"
    assert gate_model_config("moe_router") == "k3-tp8-rank" and gate_model_config("attn_res", 16) == "k3-tp16-rank"
    # at the candidate's TP: TP8 when its scope has it, else its smallest (a TP16-only kernel
    # never runs on the TP8 preset)
    assert gate_model_config_for("gemm_situ_and_mul", (8, 16)) == "k3-tp8-rank"
    assert gate_model_config_for("gemm_situ_and_mul", (16,)) == "k3-tp16-rank"
    assert gate_model_config_for("add_rmsnorm", (16,)) == "k3-tp16-rank-addnorm"
    root = Path(__file__).resolve().parents[2]                  # committed candidates' scopes
    assert candidate_gate_model_config(root, "gemm_situ_and_mul", "389f7ccfe20c") == "k3-tp16-rank"
    assert candidate_gate_model_config(root, "add_rmsnorm", "48258db76dd2") == "k3-tp8-rank-addnorm"


# ---- (a) the decode path calls add_rmsnorm, never attn_res ----------------------------------
def test_addnorm_decode_calls_add_rmsnorm_through_the_registry(addnorm_weights):
    reg = Registry()
    model = K3Decoder(CFG, addnorm_weights, reg)
    prompts = [[257, 72, 105], [257, 1]]
    cache = DecodeCache.allocate(CFG, 2, 8)
    logits = model.prefill(prompts, cache)
    reg.reset_counters()
    logits = model.step(logits.argmax(-1), cache)
    assert torch.isfinite(logits).all() and 0.3 < float(logits.std()) < 10
    # per step: attention inputs of layers 1..L-1, every MLP input, the final norm
    assert _counts(reg, "add_rmsnorm", Outcome.FALLBACK) == 2 * CFG.n_layers
    assert _counts(reg, "attn_res") == 0
    assert all(k.outcome is Outcome.FALLBACK and k.reason is Reason.NO_KERNEL for k in reg.counters())
    assert cache.lens.tolist() == [4, 3]


# ---- (b) the residual bookkeeping against a hand computation ------------------------------
def test_addnorm_residual_stream_matches_a_hand_computation(addnorm_weights):
    """Test-only kernels record every add_rmsnorm call and every GEMM output of one step; the
    stream must be embedding, then bf16(previous stream + previous sublayer output) each call,
    the sublayer outputs must be the attention / FFN outputs, and the final out the LM head's input."""
    w = addnorm_weights
    name_of = {id(t): k for k, t in w.items()}
    calls: list[dict] = []
    gemm_out: dict[str, torch.Tensor] = {}

    def add_norm_fn(x, residual, weight, out, residual_out):
        r = _reference("add_rmsnorm", x=x, residual=residual, weight=weight)
        out.copy_(r["out"])
        residual_out.copy_(r["residual_out"])
        calls.append({"x": x.clone(), "residual": residual.clone(), "weight": name_of[id(weight)],
                      "out": out.clone(), "residual_out": residual_out.clone()})

    def gemm_fn(x, weight, out):
        out.copy_(_reference("skinny_gemm", x=x, weight=weight)["out"])
        gemm_out[name_of[id(weight)]] = out.clone()

    reg = Registry(check_shapes=False)
    reg.register("add_rmsnorm", CPU_TP1, add_norm_fn)
    reg.register("skinny_gemm", CPU_TP1, gemm_fn)
    tokens = torch.tensor([72, 3])
    logits = K3Decoder(CFG, w, reg).step(tokens, DecodeCache.allocate(CFG, 2, 4))
    assert _counts(reg, "add_rmsnorm", Outcome.KERNEL) == len(calls) == 2 * CFG.n_layers

    want_w = ["layers.0.mlp_norm"]
    for i in range(1, CFG.n_layers):
        want_w += [f"layers.{i}.attn_norm", f"layers.{i}.mlp_norm"]
    assert [c["weight"] for c in calls] == want_w + ["final_norm"]

    assert torch.equal(calls[0]["residual"], w["embed"][tokens])            # layer 0: residual = embedding
    for prev, cur in zip(calls, calls[1:]):
        hand = (prev["x"].float() + prev["residual"].float()).to(torch.bfloat16)
        assert torch.equal(cur["residual"], hand)

    # the sublayer outputs: attention o_proj, dense FFN down (layer 0), latent up + shared down (MoE)
    def attn_out(i: int) -> torch.Tensor:
        return gemm_out[f"layers.{i}.{'mla' if CFG.is_mla(i) else 'kda'}.o_proj"]

    def ffn_out(i: int) -> torch.Tensor:
        if CFG.is_dense(i):
            return gemm_out[f"layers.{i}.mlp.down"]
        p = f"layers.{i}.moe."
        return (gemm_out[p + "up"].float() + gemm_out[p + "shared_down"].float()).to(torch.bfloat16)

    assert torch.equal(calls[0]["x"], attn_out(0))
    for i in range(1, CFG.n_layers):
        assert torch.equal(calls[2 * i - 1]["x"], ffn_out(i - 1)), f"layer {i} attention input"
        assert torch.equal(calls[2 * i]["x"], attn_out(i)), f"layer {i} MLP input"
    assert torch.equal(calls[-1]["x"], ffn_out(CFG.n_layers - 1))
    assert torch.equal(logits, calls[-1]["out"].float() @ w["lm_head"].float().t())


# ---- (c) the default config stays AttnRes ------------------------------------------------
def test_default_tiny_calls_attn_res_and_never_add_rmsnorm(tiny_weights):
    cfg = get_config("tiny")
    assert cfg.residual is Residual.ATTN_RES
    reg = Registry()
    K3Decoder(cfg, tiny_weights, reg).step(torch.tensor([72, 3]), DecodeCache.allocate(cfg, 2, 4))
    assert _counts(reg, "attn_res") == 2 * cfg.n_layers            # MLP inputs, attention inputs 1.., final
    assert _counts(reg, "add_rmsnorm") == 0


def test_the_two_residuals_decode_differently_on_the_same_weights(tiny_weights):
    toks = torch.tensor([72, 3])
    out = [K3Decoder(c, tiny_weights, Registry()).step(toks, DecodeCache.allocate(c, 2, 4))
           for c in (get_config("tiny"), CFG)]
    assert not torch.allclose(out[0], out[1])


# ---- the rank-width config reaches a kernel through the registry's shape check ---------------
def test_rank_width_add_rmsnorm_passes_the_shape_check_tiny_width_does_not():
    cfg = get_config("k3-tp8-rank-addnorm")

    def fn(x, residual, weight, out, residual_out):
        r = _reference("add_rmsnorm", x=x, residual=residual, weight=weight)
        out.copy_(r["out"])
        residual_out.copy_(r["residual_out"])

    reg = Registry()                                  # check_shapes=True: the catalogue's per-rank shapes
    reg.register("add_rmsnorm", KernelScope(archs=("cpu",), tp=(8,), batch=(1, 64)), fn)
    g = torch.Generator().manual_seed(0)
    for hidden in (cfg.hidden, CFG.hidden):
        x, res = (torch.randn(2, hidden, generator=g).to(torch.bfloat16) for _ in range(2))
        got = reg.run("add_rmsnorm", {"x": x, "residual": res, "weight": torch.ones(hidden, dtype=torch.bfloat16)},
                      tp=cfg.tp, site="layers.1.attn_add_norm")
        assert torch.equal(got["residual_out"], (x.float() + res.float()).to(torch.bfloat16))
    assert {(k.outcome, k.reason): n for k, n in reg.counters().items()} == {
        (Outcome.KERNEL, Reason.IN_SCOPE): 1, (Outcome.FALLBACK, Reason.SHAPE): 1}


def test_checkpoint_loader_refuses_addnorm_configs(tmp_path, addnorm_weights):
    from harness.model.loader import convert, load_checkpoint, to_checkpoint

    with pytest.raises(UserError, match="AttnRes"):
        load_checkpoint(tmp_path, CFG)
    with pytest.raises(UserError, match="AttnRes"):
        to_checkpoint(addnorm_weights, CFG)
    with pytest.raises(UserError, match="AttnRes"):
        convert(lambda name: torch.zeros(1), get_config("k3-tp8-rank-addnorm"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_addnorm_cuda_graph_step_matches_eager():
    reg = Registry()
    model = K3Decoder(CFG, init_weights(CFG, 0, "cuda"), reg)
    assert_graph_step_matches_eager(model, CFG, steps=3)
    assert _counts(reg, "add_rmsnorm") > 0 and _counts(reg, "attn_res") == 0
