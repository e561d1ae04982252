"""skinny_gemm: the swapab_xs family's partition (K slices per cluster rank, rows per warp, reduction slots) and summation
order, emulated in PyTorch on the CPU with each human point's own rendered helpers.

Ragged edges covered: N = 6288 / 3216 (last CTA partly or wholly past N per warp), K = 2112
(66 blocks over 8 ranks), K = 128 (4 blocks: cluster capped), B = 9 / 33 / 64 (partial tiles)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point
from reference_impls.skinny_gemm import SHAPE_NAMES, gemm_kn

from kernel_helpers import ROOT, load_module, swapab_partial_sums

FAMILIES = ROOT / "prompts/kernels/skinny_gemm"


def _family(name: str):
    from harness.agent.families import load_family

    return load_family(FAMILIES / f"{name}.py.j2", "skinny_gemm")


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p for p in pts if p["op"] == "skinny_gemm" and p["family"] == "swapab_xs"]


@lru_cache(maxsize=None)
def _module(params_json: str):
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="skinny-xs-"))
    (d / "kernel.py").write_text(_family("swapab_xs").render(json.loads(params_json)))
    return load_module(d / "kernel.py", f"skinny_xs_{abs(hash(params_json))}")


def _params():
    pts = _points()
    if not pts:
        return [pytest.param(json.dumps(_family("swapab_xs").start(), sort_keys=True), id="default")]
    return [pytest.param(json.dumps(p["params"], sort_keys=True), id=p["label"]) for p in pts]


@pytest.mark.parametrize("params_json", _params())
def test_every_k_block_row_and_slot_once(params_json):
    m = _module(params_json)
    # rows: warp w, lane slot (idx, ln) -> every row of a CTA exactly once (the grid's CTAs tile N,
    # asserted below; rows past N are dropped by the store mask)
    rows = torch.zeros(m.ROWS, dtype=torch.int32)
    for w in range(m.WARPS):
        for idx in range(m.FRAG):
            for ln in range(32):
                dr, dt = m.out_pos(idx, ln)
                if dt == 0:
                    rows[w * m.WROWS + dr] += 1
    assert bool((rows == 1).all())
    checked = set()
    for tp in (8, 16):
        for shape in SHAPE_NAMES:
            k, n = gemm_kn(shape, tp)
            p = m.plan(k, n)
            assert 1 <= p.ck <= m.MAX_CLUSTER and p.n_blocks * m.ROWS >= n > (p.n_blocks - 1) * m.ROWS
            for unroll in (m.UNROLL, m.UNROLL_LARGE):
                seen = torch.zeros(p.kbt, dtype=torch.int32)
                for rank in range(p.ck):
                    blocks = m.rank_blocks(p, rank, unroll)
                    assert blocks, (shape, tp, rank)                 # no idle rank in a cluster
                    seen[blocks] += 1
                assert bool((seen == 1).all()), (shape, tp, unroll)
            checked.add(p.ck)
    # reduction: the owners of a round's slots are every slot once; slots map onto
    # (warp', tile, row, token) of the round one to one
    for ck in sorted(checked):
        p = m.Plan(k=0, n=0, n_blocks=0, ck=ck, kbt=0, kb=0)
        for n_tiles in (m.SMALL_M // 8, m.LARGE_M // 8):
            tpr = m.tiles_per_round(n_tiles)
            owned = torch.zeros(m.n_slots(n_tiles), dtype=torch.int32)
            for rank in range(ck):
                for w in range(m.WARPS):
                    owned[m.owned_slots(p, n_tiles, rank, w)] += 1
            assert bool((owned == 1).all()), (ck, n_tiles)
            hit = torch.zeros(m.WARPS, tpr, m.WROWS, 8, dtype=torch.int32)
            for sl in range(m.n_slots(n_tiles)):
                for ln in range(32):
                    hit[m.slot_pos(sl, ln, tpr)] += 1
            assert bool((hit == 1).all()), (ck, n_tiles)


def emulate(m, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The kernel's sums: per cluster rank an fp32 partial over its K blocks (lane k permutation
    8t + 4s + q covers each 32-block once), then the owner's sum over ranks in rank order, one
    bf16 rounding; rows past N (clamped loads) and tokens past B are dropped."""
    return swapab_partial_sums(m, x, w, lambda p, unroll: (m.rank_blocks(p, rank, unroll) for rank in range(p.ck)))


@pytest.mark.parametrize("params_json", _params())
@pytest.mark.parametrize("shape,tp,batch", [("kda_in_proj", 8, 3), ("kda_in_proj", 16, 64), ("dense_down", 16, 9),
                                            ("kda_f_b", 16, 33), ("mla_o_proj", 8, 1), ("mla_qkv_a", 8, 17)])
def test_emulation_matches_reference(params_json, shape, tp, batch):
    m = _module(params_json)
    defn = reference_impls.get("skinny_gemm")
    pt = Point(tp=tp, batch=batch, shape=shape)
    inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch), "cpu")
    ref = defn.run_reference(inputs)
    res = compare(defn, {"out": emulate(m, inputs["x"], inputs["weight"])}, ref)
    assert res.ok, res.summary()
