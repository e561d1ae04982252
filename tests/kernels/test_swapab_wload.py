"""The `wload` and `xpre` knobs of the swap-AB GEMM template (prompts/kernels/_shared/_swapab.j2,
session 33), checked on the CPU through the compiled PTX.

wload puts cache hints on every weight load (the weights are read once per call: L1 no_allocate,
L2 prefetch of 128 or 256 bytes around each 64-byte row segment a quarter-warp reads) and none on
the x loads. xpre makes the small kernel issue a chunk's x loads right behind its weight loads,
before any MMA of the chunk. skinny_gemm 268009 (promoted in session 33: pf128nol1, xpre, unroll 6)
runs both; on the H200 it streams latent_down at the copy kernel's speed (results/h200/session33).
The GPU checks the sums (bench_kernels.py's correctness check, the numerics_unit gate).
"""
from __future__ import annotations

import re

import pytest

from kernel_helpers import ROOT, load_module, swapab_source_kernels, template_params, variant_source

PROMOTED = "268009f21621"            # wload=pf128nol1, xpre, unroll 6
PLAIN = "fcb21beff05f"               # the same GEMM without either knob
QUALIFIERS = {                       # knob value -> the ld.global qualifiers of a weight load
    "pf128": ".L2::128B",
    "pf256": ".L2::256B",
    "nol1": ".L1::no_allocate",
    "pf128nol1": ".L1::no_allocate.L2::128B",
    "pf256nol1": ".L1::no_allocate.L2::256B",
}


def _latent_down(source: str) -> tuple[str, str]:
    """(small, large) PTX of a skinny kernel source at TP8 latent_down, compiled once per distinct source
    (268009 and the plain kernel serve several tests)."""
    return swapab_source_kernels(source, 8, "latent_down")


def _committed(cid: str) -> str:
    return (ROOT / "kernels_generated/skinny_gemm" / cid / "kernel.py").read_text()


def _loads(ptx: str) -> dict[str, int]:
    """ld.global qualifier string ('' for a plain load) -> count."""
    out: dict[str, int] = {}
    for q in re.findall(r"ld\.global((?:\.L[12]::\w+)*)\.v4", ptx):
        out[q] = out.get(q, 0) + 1
    return out


def test_every_knob_value_renders_its_hints():
    """Each value of the space renders a copy atom with its hints; plain renders none."""
    import json

    space = json.loads((ROOT / "prompts/kernels/skinny_gemm/swapab.space.json").read_text())
    assert set(space["params"]["wload"]) == {"plain", *QUALIFIERS}
    for value, qual in QUALIFIERS.items():
        src = variant_source("skinny_gemm", PLAIN, wload=value)
        assert f'WLOAD = "{value}"' in src and "cute.copy(wld, " in src
        assert ("SIZE_128B" in src) == ("128B" in qual) and ("SIZE_256B" in src) == ("256B" in qual)
        assert ("NO_ALLOCATE" in src) == ("no_allocate" in qual)
    plain = variant_source("skinny_gemm", PLAIN, wload="plain")
    assert "wld" not in plain and "WLOAD" not in plain
    assert plain == _committed(PLAIN)


@pytest.mark.parametrize("value", ["pf256", "pf128nol1"])
def test_weight_loads_carry_the_hints_and_x_loads_none(value):
    """Small and large kernel: every weight load (2 * M_TILES per K block in flight) has the knob's
    qualifiers, every x load is plain. The same count on the plain kernel finds no hint at all."""
    params = template_params("skinny_gemm", PROMOTED)
    small, large = _latent_down(variant_source("skinny_gemm", PROMOTED, wload=value))
    u, ul = params["unroll"], params["unroll_large"]
    assert _loads(small) == {QUALIFIERS[value]: 2 * u, "": u}            # xpre: U x vectors, one token tile
    got = _loads(large)
    assert got[QUALIFIERS[value]] == 2 * ul and set(got) == {QUALIFIERS[value], ""}
    plain_small, _ = _latent_down(_committed(PLAIN))
    assert set(_loads(plain_small)) == {""}


def test_xpre_issues_the_chunk_loads_before_its_mmas():
    """268009's small kernel: every global load of the chunk precedes the chunk's first MMA. Without
    xpre (the same render, xpre off) x loads follow MMAs, so the check can fail."""
    def order(ptx: str) -> tuple[int, int]:
        lines = ptx.splitlines()
        return (max(i for i, s in enumerate(lines) if "ld.global" in s),
                min(i for i, s in enumerate(lines) if "mma.sync" in s))

    small, _ = _latent_down(_committed(PROMOTED))
    last_load, first_mma = order(small)
    assert last_load < first_mma
    small_off, _ = _latent_down(variant_source("skinny_gemm", PROMOTED, xpre=False))
    last_load, first_mma = order(small_off)
    assert last_load > first_mma


def test_the_next_mla_qkv_a_plan_renders_one_cta_an_sm_without_a_cluster(tmp_path):
    """The plan the README names for mla_qkv_a's next GPU session (session 33's space widening):
    268009 with an ALT plan of 16 warps, no cluster, chunked, unroll 6. 132 CTAs of 512 threads, each
    warp 14 K blocks, within 128 registers (one CTA an SM, 16 warps) and no spills; the latent GEMMs'
    kernels stay 268009's. Compiled for sm_90a at TP8."""
    from gpu_scripts import tool_script
    from harness.toolchain.compile import compile_candidate

    rv = tool_script("render_variant")
    cand = rv.render_variant("skinny_gemm", PROMOTED, {"alt_warps": 16, "alt_max_cluster": 1, "alt_ring": False,
                                                        "alt_unroll": 6}, root=tmp_path)
    mod = load_module(cand.kernel_path, "sk_alt16")
    p = mod.plan(*mod.gemm_kn("mla_qkv_a", 8), alt=True)
    assert (p.n_blocks, p.ck, p.warps, p.kb, p.unroll, p.ring) == (132, 1, 16, 14, 6, False)
    assert mod.plan(*mod.gemm_kn("latent_down", 8)) == \
        load_module(ROOT / "kernels_generated/skinny_gemm" / PROMOTED / "kernel.py", "sk_268009").plan(
            *mod.gemm_kn("latent_down", 8))
    rep = compile_candidate(cand, "sm_90a", 8, {"shape": "mla_qkv_a"}, cache_root=tmp_path / "cache")
    assert rep.ok, rep.message
    assert max(k.registers for k in rep.kernels) <= 128 and rep.spill_bytes == 0
