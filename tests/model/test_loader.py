"""Checkpoint loader: a synthetic K3-named safetensors file round-trips into the same
internal weights, and TP sharding picks the right slices."""
from __future__ import annotations

from dataclasses import replace

import torch
from safetensors.torch import save_file

from harness.model import K3Decoder, get_config, init_weights
from harness.model.loader import P, load_checkpoint, to_checkpoint
from harness.registry import Registry

CFG = get_config("tiny")


def test_round_trip_through_safetensors(tmp_path, tiny_weights):
    ck = to_checkpoint(tiny_weights, CFG)
    assert P + "layers.1.self_attn.q_conv1d.weight" in ck and P + "layers.3.self_attn.kv_b_proj.weight" in ck
    assert P + "layers.2.block_sparse_moe.experts.5.w2.weight_packed" in ck
    save_file(ck, str(tmp_path / "model.safetensors"))
    back = load_checkpoint(tmp_path, CFG)
    assert back.keys() == tiny_weights.keys()
    for k, v in tiny_weights.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    # the loaded model decodes exactly like the original
    toks = torch.tensor([1, 2])
    from harness.model import DecodeCache
    outs = []
    for w in (tiny_weights, back):
        cache = DecodeCache.allocate(CFG, 2, 4)
        outs.append(K3Decoder(CFG, w, Registry()).step(toks, cache))
    assert torch.equal(outs[0], outs[1])


def test_tp_sharding_takes_the_rank_slices(tmp_path):
    full_cfg = replace(CFG, kda_heads=2, mla_heads=2, moe_inter=64, shared_inter=64, dense_inter=64)
    ck = to_checkpoint(init_weights(full_cfg, seed=3), full_cfg)
    save_file(ck, str(tmp_path / "m.safetensors"))
    rank_cfg = replace(full_cfg, tp=2, kda_heads=1, mla_heads=1, moe_inter=32, shared_inter=32, dense_inter=32)
    w = load_checkpoint(tmp_path / "m.safetensors", rank_cfg, rank=1)
    a = P + "layers.1.self_attn."
    inner = 128
    # column-parallel: rank 1 holds rows [inner, 2*inner) of q_proj; row-parallel: columns of o_proj
    assert torch.equal(w["layers.1.kda.in_proj"][:inner], ck[a + "q_proj.weight"][inner:])
    assert torch.equal(w["layers.1.kda.o_proj"], ck[a + "o_proj.weight"][:, inner:])
    assert torch.equal(w["layers.1.kda.A_log"], ck[a + "A_log"][1:2])
    # replicated: latent down-projection, f_a rows inside the fused in_proj
    m = P + "layers.1.block_sparse_moe."
    assert torch.equal(w["layers.1.moe.down"], ck[m + "routed_expert_down_proj.weight"])
    assert torch.equal(w["layers.1.kda.in_proj"][4 * inner:4 * inner + CFG.f_rank], ck[a + "f_a_proj.weight"])
    # experts: w1 rows of the intermediate, w2 input columns (packed: 2 per byte)
    e = m + "experts.3."
    assert torch.equal(w["layers.1.moe.w13"][3, :32], ck[e + "w1.weight_packed"][32:])
    assert torch.equal(w["layers.1.moe.w2"][3], ck[e + "w2.weight_packed"][:, 16:])
    # MLA: kv_b rows of head 1 split into W_UK / W_UV
    kv_b = ck[P + "layers.3.self_attn.kv_b_proj.weight"].reshape(2, CFG.qk_nope + CFG.v_head, CFG.kv_lora)
    assert torch.equal(w["layers.3.mla.w_uk"][0], kv_b[1, :CFG.qk_nope])
    assert torch.equal(w["layers.3.mla.w_uv"][0], kv_b[1, CFG.qk_nope:].t())
