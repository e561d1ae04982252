"""The `bulk` and `alt_bulk` knobs of the swap-AB GEMM template (prompts/kernels/_shared/_swapab.j2,
session 17), checked on the CPU: which plans take them (bulk_fits) and what the compiled PTX does.

A bulk small kernel requests each warp's whole weight slice by cp.async.bulk (one copy per slice
row, issued by lane 0, completing on the warp's mbarrier), loads x into registers meanwhile, waits
once, and reads its MMA fragments from shared memory: per 8-token tile kb x M_TILES x 2 ld.shared.v4
of weights and kb global loads of x, and no global load of a weight. The same check on d086de (the
promoted point the bulk ones derive from) must fail: the test can fail. alt_bulk (the promoted
f59c24) gives only the ALT plan's small kernel (TP16 shared_gate_up) that shape; at TP8 its small
kernel is d086de's, without a bulk copy.
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, family_candidates, load_module, swapab_kernels, template_params, without_kernel_ids

PLAIN = "d086decc8fad"                   # gemm_situ_and_mul promoted in session 15: the LDG ring
ALT_ONLY = "f59c240f46ef"                # promoted in session 17: alt_bulk, bulk off


def _bulk_points() -> list[str]:
    """Committed points with bulk on and per-row copies (tma points: tests/kernels/test_swapab_tma.py)."""
    return [c for c in family_candidates("gemm_situ_and_mul", "swapab_situ")
            if template_params("gemm_situ_and_mul", c).get("bulk")
            and not template_params("gemm_situ_and_mul", c).get("tma")]


def _module(cid: str):
    return load_module(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", f"gs_bulk_{cid}")


def test_the_knob_has_committed_points():
    assert len(_bulk_points()) >= 2


@pytest.mark.parametrize("cid", _bulk_points())
def test_bulk_fits_takes_exact_plans_that_fit_shared_memory(cid):
    mod = _module(cid)
    p = mod.plan(*mod.gemm_kn("shared_gate_up", 8))
    assert p.kb * p.ck * mod.WARPS == p.kbt                          # the committed plans are exact
    smem = mod.WARPS * mod.ROWS * (p.kb * 32 + 8) * 2
    assert smem <= mod.BULK_SMEM_MAX and mod.bulk_fits(p, 1)
    # the same plan with more blocks per slice than shared memory holds falls back to the ring
    big = p._replace(kb=p.kb * 16, kbt=p.kbt * 16)
    assert mod.WARPS * mod.ROWS * (big.kb * 32 + 8) * 2 > mod.BULK_SMEM_MAX and not mod.bulk_fits(big, 1)
    # a ragged plan (a slice that skips blocks) is never bulk
    assert not mod.bulk_fits(p._replace(kbt=p.kbt - 1), 1)
    # too many x vectors for registers: more 8-token tiles than BULK_X_REGS allows
    assert not mod.bulk_fits(p, mod.BULK_X_REGS // p.kb + 1)


def _small_kernel(cid: str, tmp_path, tp: int = 8) -> tuple[str, object]:
    """The PTX body of the small (B <= SMALL_M) kernel at this TP, and the plan it runs."""
    small, _ = swapab_kernels(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", tmp_path, tp,
                              "shared_gate_up")
    mod = _module(cid)
    return small, mod.plan(*mod.gemm_kn("shared_gate_up", tp), alt=mod.uses_alt("shared_gate_up", tp))


def _bulk_shape(body: str, kb: int, m_tiles: int) -> bool:
    """One cp.async.bulk instruction (lane 0's unrolled rows may share it through a loop or repeat it),
    an mbarrier wait, weights from shared memory, and only x from global memory."""
    bulks = len(re.findall(r"cp\.async\.bulk\.shared::cluster\.global", body))
    lds = len(re.findall(r"ld\.shared\.v4", body))
    ldg = len(re.findall(r"ld\.global[.\w]*\.v4", body))
    return bulks >= 1 and "mbarrier.try_wait" in body and lds == kb * m_tiles * 2 and ldg == kb


@pytest.mark.parametrize("cid", _bulk_points())
def test_bulk_small_kernel_streams_weights_by_cp_async_bulk(cid, tmp_path):
    body, p = _small_kernel(cid, tmp_path)
    mod = _module(cid)
    assert _bulk_shape(body, p.kb, mod.M_TILES)
    assert len(re.findall(r"cp\.async\.bulk\.shared::cluster\.global", body)) in (1, mod.ROWS)


def test_the_check_fails_on_the_ring_kernel(tmp_path):
    body, p = _small_kernel(PLAIN, tmp_path)
    assert not _bulk_shape(body, p.kb, 1)
    assert "cp.async.bulk" not in body


def test_alt_bulk_streams_only_the_alt_plan(tmp_path):
    assert template_params("gemm_situ_and_mul", ALT_ONLY).get("alt_bulk") and \
        not template_params("gemm_situ_and_mul", ALT_ONLY).get("bulk")
    body16, p16 = _small_kernel(ALT_ONLY, tmp_path, tp=16)
    assert p16.warps == _module(ALT_ONLY).ALT_WARPS                # TP16 runs the ALT plan
    assert _bulk_shape(body16, p16.kb, 1)
    body8, p8 = _small_kernel(ALT_ONLY, tmp_path, tp=8)
    assert "cp.async.bulk" not in body8 and not _bulk_shape(body8, p8.kb, 1)
    # ... and TP8's small kernel is the ring kernel of d086de, instruction for instruction
    ring8, _ = _small_kernel(PLAIN, tmp_path, tp=8)
    assert without_kernel_ids(body8) == without_kernel_ids(ring8)
