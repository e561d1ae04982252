"""The kda_decode `persist` kernel and the `persisthybrid` family built on it.

- Math: persist's per-row order is the fused family's with V_SPLIT = 1 at the same lanes per row and
  warps, so the fused emulation (test_kda_emulation) at those parameters is its emulation too.
- Pipeline: a model of the persistent loop written from the template's index formulas (tile
  t = cta + it * CTAS; tile it + STAGES - 1 prefetched into stage (it + STAGES - 1) % STAGES at the
  top of iteration it) visits every (token, head) tile once and never overwrites a stage that a
  tile still to be computed was prefetched into.
- CTAs per SM: shared memory and threads cap ctas_per_sm; launch bounds only when more than one.
- Hybrid: the fused window is in tiles B * h, per state dtype.
- PTX (compiled on the CPU): per persistent-loop body, one cp.async.cg per state vector a thread
  copies and three CTA barriers; launch bounds only on the plans with two CTAs per SM.
"""
from __future__ import annotations

import json
import re

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point
from kernel_helpers import ROOT, compiled_ptx, family_candidates, load_module
from test_kda_emulation import emulate

D = 128


def _persist_points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p["params"] for p in pts if p["op"] == "kda_decode" and p["family"] == "persist"]


def _module(cid: str):
    return load_module(ROOT / "kernels_generated/kda_decode" / cid / "kernel.py", f"kda_persist_{cid}")


def _persist_shapes() -> list[tuple[int, int]]:
    """(lanes per row, warps) of every persistent plan of the committed points."""
    shapes = {(p["threads_per_row"], p["warps"]) for p in _persist_points()}
    for cid in family_candidates("kda_decode", "persisthybrid"):
        m = _module(cid)
        shapes |= {(m.LARGE_TPR, plan.warps) for plan in m.PLANS.values()}
    for cid in family_candidates("kda_decode", "persistmix"):
        shapes |= {(plan.tpr, plan.warps) for plan in _module(cid).PLANS.values()}
    return sorted(shapes)


@pytest.mark.parametrize("tpr,warps", _persist_shapes())
@pytest.mark.parametrize("tp,state_dtype,bsz", [(8, "fp32", 3), (16, "bf16", 2)])
def test_persist_math_is_fused_v1_at_its_shape(tpr, warps, tp, state_dtype, bsz):
    defn = reference_impls.get("kda_decode")
    point = Point(batch=bsz, tp=tp, state_dtype=state_dtype)
    inputs = defn.make_inputs(point, torch.Generator().manual_seed(11 + bsz), "cpu")
    got, writes = emulate(inputs, {"v_split": 1, "threads_per_row": tpr, "warps": warps}, tp)
    for name, cnt in writes.items():
        assert int(cnt.min()) == 1 and int(cnt.max()) == 1, name
    res = compare(defn, got, defn.run_reference(inputs), inputs)
    assert res.ok, res.summary()


def schedule(n_tiles: int, ctas: int, stages: int) -> list[int]:
    """Tiles computed, in order over all CTAs; asserts the stage ring is never overwritten early."""
    done = []
    for cta in range(ctas):
        stage_holds: dict[int, int] = {}
        for p in range(stages - 1):                          # fill: tiles 0 .. STAGES-2 of this CTA
            t = cta + p * ctas
            if t < n_tiles:
                stage_holds[p] = t
        n_mine = (n_tiles - cta + ctas - 1) // ctas
        for it in range(n_mine):
            t = cta + it * ctas
            tn = t + (stages - 1) * ctas
            if tn < n_tiles:
                stg = (it + stages - 1) % stages
                assert stage_holds.get(stg) in (None, t - ctas), "prefetch overwrote a tile not yet computed"
                stage_holds[stg] = tn
            assert stage_holds[it % stages] == t, "the tile computed is not the one its stage holds"
            done.append(t)
    return done


@pytest.mark.parametrize("stages", [1, 2, 3])                      # 1: no prefetch ahead (fp32_stages 1)
@pytest.mark.parametrize("n_tiles", [6, 12, 131, 132, 133, 384, 768])
@pytest.mark.parametrize("ctas", [132, 264])
def test_pipeline_visits_every_tile_once(n_tiles, ctas, stages):
    assert sorted(schedule(n_tiles, ctas, stages)) == list(range(n_tiles))


def test_ctas_per_sm_capped_by_shared_memory_and_threads():
    cid = family_candidates("kda_decode", "persist")[0]
    m = _module(cid)
    from cutlass import BFloat16, Float32

    assert m.KdaPersist(Float32, 12, 2, 16, 8, 2).per_sm == 1        # 2 x 64 KiB fp32 stages: one per SM
    assert m.KdaPersist(BFloat16, 12, 2, 16, 8, 2).per_sm == 2       # 2 x 32 KiB bf16 stages: two fit
    assert m.KdaPersist(BFloat16, 12, 2, 16, 16, 2).per_sm == 2      # 512 threads: two fit 2048 (registers are
    #                                                                  the compile test's: no spills allowed)
    assert m.KdaPersist(BFloat16, 12, 3, 16, 8, 2).per_sm == 1       # 2 x 3 x (32 + 6.5) KiB > 227 KiB
    assert m.KdaPersist(Float32, 12, 3, 16, 8, 2).per_sm == 1        # 3 x 64 KiB + small inputs <= 227 KiB
    k = m.KdaPersist(BFloat16, 12, 2, 16, 8, 1)
    assert k.per_sm == 1 and k.ctas == m.P_SMS


@pytest.mark.parametrize("cid", family_candidates("kda_decode", "persisthybrid"))
def test_hybrid_window_is_in_tiles(cid):
    m = _module(cid)
    for name, plan in m.PLANS.items():
        b8 = m.ByBatch(plan, 12, "fused", "persist")
        b16 = m.ByBatch(plan, 6, "fused", "persist")
        for bsz in (1, 2, 4, 8, 16, 32):
            assert b8.uses_fused(bsz) == b16.uses_fused(2 * bsz), (name, bsz)
            assert b8.uses_fused(bsz) == (plan.fused_lo < 12 * bsz <= plan.fused_hi)
        t = torch.zeros(3, 1)
        calls = []
        b = m.ByBatch(plan, 12, lambda *a: calls.append("fused"), lambda *a: calls.append("persist"))
        b(t)
        assert calls == ["fused" if plan.fused_lo < 36 <= plan.fused_hi else "persist"]


@pytest.mark.parametrize("cid", family_candidates("kda_decode", "persisthybrid"))
@pytest.mark.parametrize("state_dtype", ["fp32", "bf16"])
def test_persist_ptx(cid, state_dtype, tmp_path):
    m = _module(cid)
    from cutlass import BFloat16, Float32

    plan = m.PLANS[state_dtype]
    k = m.KdaPersist({"fp32": Float32, "bf16": BFloat16}[state_dtype], 12, plan.stages, m.LARGE_TPR, plan.warps,
                     plan.ctas_per_sm)
    ptx = compiled_ptx(ROOT / "kernels_generated/kda_decode" / cid / "kernel.py", tmp_path, state_dtype=state_dtype)
    body = next(e for e in ptx.split(".entry ")[1:] if "KdaPersist" in e.split("(", 1)[0])
    per_copy = D * D // k.svec // k.threads                  # state vectors per thread per tile
    assert len(re.findall(r"cp\.async\.cg\.shared\.global", body)) == 2 * per_copy   # the fill and the loop
    assert len(re.findall(r"\bbar\.sync|\bbarrier\.sync", body)) == 3
    bounds = re.search(r"\.minnctapersm (\d+)", body)
    if k.per_sm > 1:
        assert bounds and int(bounds.group(1)) == k.per_sm
    else:
        assert bounds is None


@pytest.mark.parametrize("cid", family_candidates("kda_decode", "persistmix"))
def test_persistmix_windows_are_in_tiles(cid):
    m = _module(cid)
    kinds = ("small", "mid", "persist") + (("tiny",) if hasattr(m, "T32_KdaDecode") else ())   # fp32_tiny_hi
    for name, plan in m.PLANS.items():
        tiny_hi = getattr(plan, "tiny_hi", 0)
        b8, b16 = m.ByTiles(plan, 12, *kinds), m.ByTiles(plan, 6, *kinds)
        for bsz in (1, 2, 4, 8, 16, 32):
            assert b8.which(bsz) == b16.which(2 * bsz), (name, bsz)
            tiles = 12 * bsz
            want = ("tiny" if tiles <= tiny_hi else "small" if tiles <= plan.small_hi
                    else "mid" if plan.mid_lo < tiles <= plan.mid_hi else "persist")
            assert b8.which(bsz) == want
        calls = []
        b = m.ByTiles(plan, 12, *(lambda *a, k=k: calls.append(k) for k in kinds))
        b(torch.zeros(3, 1))
        assert calls == [b.which(3)]


@pytest.mark.parametrize("cid", family_candidates("kda_decode", "persistmix"))
@pytest.mark.parametrize("state_dtype", ["fp32", "bf16"])
def test_persistmix_compiles_the_plans_it_uses(cid, state_dtype, tmp_path):
    """One PTX entry per plan with a non-empty window: the tiny, small and mid fused kernels, the persistent one."""
    m = _module(cid)
    plan = m.PLANS[state_dtype]
    ptx = compiled_ptx(ROOT / "kernels_generated/kda_decode" / cid / "kernel.py", tmp_path, state_dtype=state_dtype)
    names = [e.split("(", 1)[0] for e in ptx.split(".entry ")[1:]]
    assert sum("KdaPersist" in n for n in names) == 1
    assert sum("MID_KdaDecode" in n for n in names) == int(plan.mid_hi > plan.mid_lo)
    assert sum("T32_KdaDecode" in n for n in names) == int(getattr(plan, "tiny_hi", 0) > 0)
    assert sum("KdaDecode" in n and "MID_" not in n and "T32_" not in n for n in names) == int(plan.small_hi > 0)
