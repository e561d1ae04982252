"""The `tma` knob of the swap-AB GEMM template (prompts/kernels/_shared/_swapab.j2, session 18),
checked on the CPU: the box plan (box_blocks), its shared-memory bank property, and the compiled PTX.

With tma, a bulk small kernel copies each warp's weight slice as 2D boxes of 8 rows x BB K blocks
through a tensor map (cp.async.bulk.tensor.2d): 2 * M_TILES * KB / BB copies a warp instead of one
cp.async.bulk per row. The MMAs read the same 16-byte fragments from shared memory (kb x M_TILES x 2
ld.shared.v4 per 8-token tile), x alone comes from global memory, and the B <= 64 kernel copies
nothing. The same PTX check on f59c24 (per-row copies) must fail: the test can fail. The GPU checks
the sums (bench_kernels.py's correctness check, the numerics_unit gate).
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, family_candidates, load_module, swapab_kernels, template_params

ROW_COPIES = "f59c240f46ef"              # alt_bulk with per-row cp.async.bulk (session 17)


def _tma_points() -> list[str]:
    return [c for c in family_candidates("gemm_situ_and_mul", "swapab_situ")
            if template_params("gemm_situ_and_mul", c).get("tma")]


def _module(cid: str):
    return load_module(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", f"gs_tma_{cid}")


def test_the_knob_has_a_committed_point():
    assert _tma_points()


@pytest.mark.parametrize("kb", range(1, 33))
def test_box_blocks_divides_the_slice_and_fits_a_box_row(kb):
    bb = _module(_tma_points()[0]).box_blocks(kb)
    assert kb % bb == 0 and 1 <= bb <= 8                    # a box row holds at most 256 bf16
    odd = [d for d in (7, 5, 3) if kb % d == 0]
    assert bb == (odd[0] if odd else max(d for d in range(1, 9) if kb % d == 0))


@pytest.mark.parametrize("bb", [3, 5, 7])
def test_odd_boxes_put_a_quarter_warps_two_rows_in_opposite_bank_halves(bb):
    # a quarter-warp (8 lanes: g = 2q, 2q + 1, t = 0..3) reads 16 bytes at column t of rows g and g + 1
    row_bytes = bb * 32 * 2
    banks = lambda g, t: {(g * row_bytes + t * 16) // 4 % 32 + w for w in range(4)}  # noqa: E731
    for q in range(4):
        words = [banks(g, t) for g in (2 * q, 2 * q + 1) for t in range(4)]
        assert len(set().union(*words)) == 32                # 8 lanes x 4 words: no bank twice


def _small_and_large(cid: str, tmp_path, tp: int) -> tuple[str, str, object]:
    small, large = swapab_kernels(ROOT / "kernels_generated" / "gemm_situ_and_mul" / cid / "kernel.py", tmp_path, tp,
                                  "shared_gate_up")
    mod = _module(cid)
    return small, large, mod.plan(*mod.gemm_kn("shared_gate_up", tp), alt=mod.uses_alt("shared_gate_up", tp))


def _tma_shape(body: str, kb: int, bb: int, m_tiles: int) -> bool:
    boxes = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global", body))
    rows = len(re.findall(r"cp\.async\.bulk\.shared::cluster\.global", body))
    lds = len(re.findall(r"ld\.shared\.v4", body))
    ldg = len(re.findall(r"ld\.global[.\w]*\.v4", body))
    return (boxes == 2 * m_tiles * kb // bb and rows == 0 and "mbarrier.try_wait" in body
            and lds == kb * m_tiles * 2 and ldg == kb)


@pytest.mark.parametrize("tp", [8, 16])
def test_tma_small_kernel_copies_boxes(tp, tmp_path):
    cid = _tma_points()[0]
    mod = _module(cid)
    small, large, p = _small_and_large(cid, tmp_path, tp)
    assert mod.bulk_fits(p, 1)
    bb = mod.box_blocks(p.kb)
    assert mod.ROWS * p.kb * 64 == 2 * mod.M_TILES * (p.kb // bb) * 8 * bb * 32 * 2   # expect_tx = the boxes' bytes
    assert _tma_shape(small, p.kb, bb, mod.M_TILES)
    assert "cp.async.bulk" not in large


def test_the_check_fails_on_per_row_copies(tmp_path):
    small, _, p = _small_and_large(ROW_COPIES, tmp_path, 16)
    assert "cp.async.bulk.shared::cluster.global" in small
    assert not _tma_shape(small, p.kb, _module(_tma_points()[0]).box_blocks(p.kb), 1)


def test_skinny_renders_tma_with_contiguous_row_boxes(tmp_path):
    """The skinny family (rows r0 .. r0 + 15 contiguous: box rows 2 bn + hh) renders and compiles the same
    path; mla_qkv_a's ALT plan (4 warps on 4-CTA clusters, KB 14) takes it at TP8."""
    from harness.agent.families import load_family

    fam = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    params = dict(template_params("skinny_gemm", "fcb21beff05f"), alt_bulk=True, tma=True)
    src = fam.render(params)
    assert "rb = bn * 2 * M_TILES + hh" in src and "((hh % 2) * (p.n // 2)" not in src
    path = tmp_path / "k" / "kernel.py"
    path.parent.mkdir()
    path.write_text(src)
    mod = load_module(path, "sk_tma_render")
    p = mod.plan(*mod.gemm_kn("mla_qkv_a", 8), alt=True)
    assert (p.ck, p.kb) == (4, 14) and mod.bulk_fits(p, 1)
    small, _ = swapab_kernels(path, tmp_path, 8, "mla_qkv_a")
    assert _tma_shape(small, p.kb, mod.box_blocks(p.kb), mod.M_TILES)
