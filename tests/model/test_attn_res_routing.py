"""attn_res on the decode path with a growing block count: the decoder names nb as the static key
shape="nb<nb>" and passes `blocks` as the [B, nb, H] view of its [B, 8, H] buffer; the registry
routes such calls to a kernel whose scope lists the nb shapes (at rank width, true shapes
checked) and falls back with reason SHAPE when the name and the tensor disagree."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.model import DecodeCache, K3Decoder, get_config, init_weights
from harness.opdef import Point
from harness.registry import KernelScope, Outcome, Reason, Registry, TraceKey

ROOT = Path(__file__).resolve().parents[2]
H, MAX_BLOCKS = 7168, 8
DEFN = reference_impls.get("attn_res")


def _candidate_scope() -> KernelScope:
    """A rendered rowmix candidate's scope (its nb shapes), with the host as its arch."""
    metas = sorted((ROOT / "kernels_generated/attn_res").glob("*/candidate.json"))
    scopes = [json.loads(m.read_text())["scope"] for m in metas
              if (json.loads(m.read_text())["provenance"].get("template") or {}).get("family") == "rowmix"]
    assert scopes, "no rowmix candidate rendered"
    scope = KernelScope.from_json(scopes[0])
    assert scope.shapes == tuple(f"nb{n}" for n in range(1, MAX_BLOCKS + 1))
    return KernelScope(archs=("cpu",), tp=scope.tp, batch=scope.batch, dtypes=scope.dtypes, shapes=scope.shapes)


def _rank_inputs(batch: int, nb: int, seed: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    full = DEFN.make_inputs(Point(batch, 8), g)
    buf = full["blocks"]                                     # [B, 8, H]: the decoder's buffer
    inputs = dict(full, blocks=buf[:, :nb])
    return inputs, buf


def _recording_kernel(seen: list[tuple[int, int]]):
    """A kernel fn (writes its outputs in place) that records the blocks it was handed."""
    def fn(prefix, delta, blocks, w_res, w_norm, out, new_prefix):
        seen.append((int(blocks.shape[1]), int(blocks.stride(0))))
        ref = DEFN.reference(prefix, delta, blocks, w_res, w_norm)
        out.copy_(ref["out"])
        new_prefix.copy_(ref["new_prefix"])
    return fn


@pytest.mark.parametrize("nb", range(1, MAX_BLOCKS + 1))
def test_rank_width_strided_blocks_route_to_the_kernel(nb):
    seen: list[tuple[int, int]] = []
    reg = Registry()                                         # check_shapes: the true per-rank shapes
    reg.register("attn_res", _candidate_scope(), fn=_recording_kernel(seen))
    inputs, buf = _rank_inputs(2, nb, seed=nb)
    assert not inputs["blocks"].is_contiguous() or nb == MAX_BLOCKS
    got = reg.run("attn_res", inputs, tp=8, site="t", shape=f"nb{nb}")
    assert reg.counters() == {TraceKey("attn_res", Outcome.KERNEL, Reason.IN_SCOPE): 1}, reg.errors()
    assert seen == [(nb, MAX_BLOCKS * H)]                    # the view itself, not a compact copy
    want = DEFN.reference(**inputs)
    assert torch.equal(got["out"], want["out"]) and torch.equal(got["new_prefix"], want["new_prefix"])
    assert got["out"].shape == (2, H)


@pytest.mark.parametrize("nb,shape", [(3, "nb8"), (3, ""), (3, "nb4"), (8, "nb7"), (1, "nb9"), (2, "x")])
def test_rank_width_name_and_tensor_disagree_falls_back(nb, shape):
    seen: list[tuple[int, int]] = []
    reg = Registry()
    reg.register("attn_res", _candidate_scope(), fn=_recording_kernel(seen))
    inputs, _ = _rank_inputs(1, nb)
    got = reg.run("attn_res", inputs, tp=8, site="t", **({"shape": shape} if shape else {}))
    assert reg.counters() == {TraceKey("attn_res", Outcome.FALLBACK, Reason.SHAPE): 1}
    assert seen == []
    assert torch.equal(got["out"], DEFN.reference(**inputs)["out"])


def test_tiny_decoder_names_each_block_count():
    """The tiny model seals blocks at layers 0, 2, 4: its attn_res calls see nb = 1, 2, 3, each
    under shape=f"nb{nb}" (the loader receives the static key), every one on the kernel."""
    cfg = get_config("tiny")
    keys: list[str] = []
    seen: list[tuple[int, int]] = []

    def loader(candidate_dir, arch, tp, **static):
        keys.append(static["shape"])
        fn = _recording_kernel(seen)

        def checked(**t):
            assert t["blocks"].shape[1] == int(static["shape"][2:])
            fn(**t)
        return checked

    reg = Registry(loader=loader, check_shapes=False)        # tiny widths: any size reaches the kernel
    scope = KernelScope(archs=("cpu",), tp=(cfg.tp,), batch=(1, 64), dtypes=("bf16",),
                        shapes=tuple(f"nb{n}" for n in range(1, MAX_BLOCKS + 1)))
    reg.register("attn_res", scope, candidate_dir=Path("unused"))
    model = K3Decoder(cfg, init_weights(cfg, seed=0), reg)
    cache = DecodeCache.allocate(cfg, 2, 4)
    logits = model.step(torch.tensor([257, 1]), cache)
    assert torch.isfinite(logits).all()
    assert sorted(keys) == ["nb1", "nb2", "nb3"]             # one compile per block count
    counts = {k: n for k, n in reg.counters().items() if k.op == "attn_res"}
    assert counts == {TraceKey("attn_res", Outcome.KERNEL, Reason.IN_SCOPE): 2 * cfg.n_layers}, reg.errors()
    assert {s for s, _ in seen} == {1, 2, 3} and {st for _, st in seen} == {MAX_BLOCKS * cfg.hidden}
