"""The skinny_gemm swapab family's partition and reduction order, emulated in PyTorch on the CPU.

Uses each human point's rendered module: its own `plan` / `slice_blocks` / `owner_rank` /
`out_pos` (the functions the kernel traces), for every shape at TP8 and TP16, so a dropped
or doubled K block or output row at a ragged edge (N = 6288, 3216; K = 2112, 128) fails here."""
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

FAMILY = ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2"


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p for p in pts if p["op"] == "skinny_gemm" and p["family"] == "swapab"]


@lru_cache(maxsize=None)
def _module(params_json: str):
    import tempfile

    from harness.agent.families import load_family

    fam = load_family(FAMILY, "skinny_gemm")
    d = Path(tempfile.mkdtemp(prefix="skinny-family-"))
    (d / "kernel.py").write_text(fam.render(json.loads(params_json)))
    return load_module(d / "kernel.py", f"skinny_family_{abs(hash(params_json))}")


def _params_of(points: list[dict]) -> list:
    return [pytest.param(json.dumps(p["params"], sort_keys=True), id=p["label"]) for p in points]


def _modules():
    return _params_of(_points()) or [pytest.param(None, id="default")]


def _mod(params_json):
    if params_json is None:
        from harness.agent.families import load_family

        params_json = json.dumps(load_family(FAMILY, "skinny_gemm").start(), sort_keys=True)
    return _module(params_json)


def _each_shape():
    return [(s, tp) for tp in (8, 16) for s in SHAPE_NAMES]


@pytest.mark.parametrize("params_json", _modules())
def test_every_k_block_once_and_every_output_once(params_json):
    m = _mod(params_json)
    for shape, tp in _each_shape():
        k, n = gemm_kn(shape, tp)
        p = m.plan(k, n)
        assert 1 <= p.ck <= 8 and p.n_blocks * m.ROWS >= n
        for unroll in (m.UNROLL, m.UNROLL_LARGE):
            assert _each_block_once(m, p, m.WARPS, unroll), (shape, tp, unroll)
        # one 8-token tile of one CTA: every (row, token) of the tile stored by exactly one thread
        hits = torch.zeros(m.ROWS, 8, dtype=torch.int32)
        for idx in range(m.FRAG):
            assert 0 <= m.owner_rank(p, idx) < p.ck
            for ln in range(32):
                dr, dt = m.out_pos(idx, ln)
                hits[dr, dt] += 1
        assert bool((hits == 1).all())


def _each_block_once(m, p, warps: int, unroll: int) -> bool:
    """Whether the (rank, warp) slices of plan p together visit each of its K blocks exactly once."""
    seen = torch.zeros(p.kbt, dtype=torch.int32)
    for rank in range(p.ck):
        for warp in range(warps):
            for b in m.slice_blocks(p, rank, warp, unroll):
                seen[b] += 1
    return bool((seen == 1).all())


def emulate(m, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The kernel's sums: per (rank, warp) slice an fp32 partial over its K blocks in order
    (lane k permutation 8t + 4s + q covers each 32-block once), then the owner's sum over
    (rank, warp) in order, one bf16 rounding; rows/tokens past the edges are dropped."""
    return swapab_partial_sums(m, x, w, lambda p, unroll: (m.slice_blocks(p, rank, warp, unroll)
                                                            for rank in range(p.ck) for warp in range(m.WARPS)))


@pytest.mark.parametrize("params_json", _modules())
@pytest.mark.parametrize("shape,tp,batch", [("kda_in_proj", 8, 3), ("kda_in_proj", 16, 9), ("dense_down", 16, 1),
                                            ("kda_f_b", 16, 64), ("mla_g_proj", 16, 5), ("mla_q_b", 16, 2)])
def test_emulation_matches_reference(params_json, shape, tp, batch):
    m = _mod(params_json)
    defn = reference_impls.get("skinny_gemm")
    pt = Point(tp=tp, batch=batch, shape=shape)
    inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch), "cpu")
    ref = defn.run_reference(inputs)
    got = {"out": emulate(m, inputs["x"], inputs["weight"])}
    res = compare(defn, got, ref)
    assert res.ok, res.summary()


@pytest.mark.parametrize("params_json", _params_of([p for p in _points() if p["params"].get("ring")]))
def test_ring_runs_only_exact_plans_and_walks_the_slice_in_order(params_json):
    """ring=True: the small kernel unrolls j = 0 .. KB-1 over block s*KB + j, which is the slice's
    list only when no slice is short (KB * CK * WARPS == KBT); elsewhere it must keep the chunk loop."""
    m = _mod(params_json)
    seen = {True: 0, False: 0}
    for shape, tp in _each_shape():
        k, n = gemm_kn(shape, tp)
        p = m.plan(k, n)
        exact = p.kb * p.ck * m.WARPS == p.kbt
        assert m.SkinnyGemm(p, m.SMALL_M // 8, m.UNROLL, True).ring is exact
        assert m.SkinnyGemm(p, m.SMALL_M // 8, m.UNROLL, False).ring is False
        seen[exact] += 1
        if exact:
            for rank in range(p.ck):
                for warp in range(m.WARPS):
                    s = rank * m.WARPS + warp
                    assert m.slice_blocks(p, rank, warp, m.UNROLL) == [s * p.kb + j for j in range(p.kb)]
    assert seen[True] and seen[False], seen      # both paths occur among the K3 shapes


class _AltView:
    """A module with an ALT plan, seen through that plan: plan(), WARPS and UNROLL are the ALT
    ones, so the emulation above walks the ALT small kernel's slices."""

    def __init__(self, m):
        self._m = m
        self.WARPS, self.UNROLL = m.ALT_WARPS, m.ALT_UNROLL

    def __getattr__(self, name):
        return getattr(self._m, name)

    def plan(self, k: int, n: int):
        return self._m.plan(k, n, alt=True)


_ALT_POINTS = _params_of([p for p in _points() if p["params"].get("alt_shapes")])


@pytest.mark.parametrize("params_json", _ALT_POINTS)
def test_alt_plan_covers_every_block_and_only_its_shapes(params_json):
    m = _mod(params_json)
    named = {s.strip() for s in json.loads(params_json)["alt_shapes"].split(",")}
    for shape, tp in _each_shape():
        assert m.uses_alt(shape, tp) is (shape in named or f"{shape}@{tp}" in named)
        k, n = gemm_kn(shape, tp)
        main, alt = m.plan(k, n), m.plan(k, n, alt=True)
        assert (main.warps, main.unroll, main.ring) == (m.WARPS, m.UNROLL, m.RING)
        assert (alt.warps, alt.unroll, alt.ring) == (m.ALT_WARPS, m.ALT_UNROLL, m.ALT_RING)
        assert alt.ck <= m.ALT_MAX_CLUSTER
        assert _each_block_once(m, alt, alt.warps, alt.unroll), (shape, tp)


@pytest.mark.parametrize("params_json", _ALT_POINTS)
@pytest.mark.parametrize("tp,batch", [(8, 1), (16, 5)])
def test_alt_plan_emulation_matches_reference(params_json, tp, batch):
    m = _mod(params_json)
    shape = next(s.strip().split("@")[0] for s in json.loads(params_json)["alt_shapes"].split(","))
    defn = reference_impls.get("skinny_gemm")
    inputs = defn.make_inputs(Point(tp=tp, batch=batch, shape=shape), torch.Generator().manual_seed(batch), "cpu")
    got = {"out": emulate(_AltView(m), inputs["x"], inputs["weight"])}
    res = compare(defn, got, defn.run_reference(inputs))
    assert res.ok, res.summary()
