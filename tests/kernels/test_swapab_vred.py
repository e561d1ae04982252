"""The `vec_reduce` knob of the swap-AB GEMM template (prompts/kernels/_shared/_swapab.j2, session
18), checked on the CPU. Not yet measured on a GPU: its candidates (gemm_situ dad006, skinny 6c8ad2)
are the next GPU session's first bench.
Plans without a cluster (CK = 1) keep the scalar reduction.

With vec_reduce the cluster reduction's unit is a (lane, m-tile): one thread on rank u % CK reads
the lane's 4 slots of every (rank, warp) with one ld.shared::cluster.v4 (the partials stored
[warp, lane, slot] by one st.shared.v4) and writes the unit's outputs. These tests pin that every
output is written once, from the same accumulator slots and in the same (rank, warp) order as the
scalar reduction (whose sums the GPU checked), and the PTX shape; the same PTX check on 497382
(the scalar form) must fail.
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, load_module, swapab_kernels, template_params, without_kernel_ids

SITU = "dad0069d52d9"                 # 497382 + vec_reduce
SCALAR = "49738245078c"               # the promoted point: scalar DSMEM loads
SKINNY = "6c8ad218a501"               # fcb21b + vec_reduce


def _situ(cid: str = SITU):
    return load_module(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", f"gs_vred_{cid}")


def _skinny():
    return load_module(ROOT / "kernels_generated" / "skinny_gemm" / SKINNY / "kernel.py", "sk_vred")


def test_the_candidates_are_the_promoted_points_plus_the_knob():
    assert template_params("gemm_situ_and_mul", SITU) == {**template_params("gemm_situ_and_mul", SCALAR),
                                                          "vec_reduce": True}
    assert template_params("skinny_gemm", SKINNY) == {**template_params("skinny_gemm", "fcb21beff05f"),
                                                      "vec_reduce": True}


def test_situ_units_write_the_scalar_reductions_outputs():
    mod = _situ()
    units = [(u, c) for u in range(32 * mod.M_TILES) for c in range(2)]
    got = [mod.vred_slot(u, c) for u, c in units]
    want = [mod.situ_slot(2 * (u // 32) + c, u % 32) for u, c in units]
    assert got == want
    assert len({(dc, dt) for _, dc, dt in got}) == len(got) == mod.FRAG * 16    # every output once


def test_skinny_units_write_the_scalar_reductions_outputs():
    mod = _skinny()
    got = [mod.vred_slot(u, c) for u in range(32 * mod.M_TILES) for c in range(4)]
    want = [(4 * (u // 32) + c, *mod.out_pos(4 * (u // 32) + c, u % 32)) for u in range(32 * mod.M_TILES)
            for c in range(4)]
    assert got == want
    assert len({(dr, dt) for _, dr, dt in got}) == len(got) == mod.FRAG * 32


@pytest.mark.parametrize("tp", [8, 16])
def test_units_spread_over_every_rank_once(tp):
    mod = _situ()
    p = mod.plan(*mod.gemm_kn("shared_gate_up", tp), alt=mod.uses_alt("shared_gate_up", tp))
    owners = [mod.unit_owner(p, u) for u in range(32 * mod.M_TILES)]
    assert len(set(owners)) == len(owners)                                   # one thread a unit
    assert {r for r, _ in owners} == set(range(p.ck))                        # every rank reduces
    assert all(th < 32 * p.warps for _, th in owners)


def _small(cid: str, tmp_path, tp: int = 8) -> tuple[str, object]:
    small, _ = swapab_kernels(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", tmp_path, tp,
                              "shared_gate_up")
    mod = _situ(cid)
    return small, mod.plan(*mod.gemm_kn("shared_gate_up", tp), alt=mod.uses_alt("shared_gate_up", tp))


def _vred_shape(body: str, ck: int, warps: int) -> bool:
    return (len(re.findall(r"ld\.shared::cluster\.v4\.f32", body)) == ck * warps
            and not re.search(r"ld\.shared::cluster\.f32", body)
            and len(re.findall(r"st\.shared\.v4", body)) == 1)


@pytest.mark.parametrize("tp", [8, 16])
def test_vred_ptx_reads_a_lane_per_rank_and_warp_in_one_load(tp, tmp_path):
    body, p = _small(SITU, tmp_path, tp)
    assert _vred_shape(body, p.ck, p.warps)


def test_the_check_fails_on_the_scalar_reduction(tmp_path):
    body, p = _small(SCALAR, tmp_path)
    assert not _vred_shape(body, p.ck, p.warps)
    assert len(re.findall(r"ld\.shared::cluster\.f32", body)) == 2 * p.ck * p.warps


def test_plans_without_a_cluster_keep_the_scalar_reduction(tmp_path):
    """skinny latent_down runs fcb21b's plan without a cluster: its small kernel is fcb21b's,
    instruction for instruction (kernel names carry the candidate id)."""
    def small(cid: str) -> str:
        path = ROOT / "kernels_generated" / "skinny_gemm" / cid / "kernel.py"
        return without_kernel_ids(swapab_kernels(path, tmp_path, 8, "latent_down")[0])

    mod = _skinny()
    assert mod.plan(*mod.gemm_kn("latent_down", 8)).ck == 1
    assert small(SKINNY) == small("fcb21beff05f")

