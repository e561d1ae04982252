"""Compiles for all three target archs on the CPU (the gate CI can run), the cache, and the
compile report's numbers."""
import time

import pytest

from harness.hardware import TARGET_ARCHS
from harness.toolchain import Verdict, compile_candidate, compile_matrix, list_candidates
from harness.toolchain.diagnostics import parse_ptxas, ptx_global_loads


def test_good_kernel_compiles_for_every_arch_then_hits_the_cache(make_fixture, cache_root):
    cand = make_fixture("wrong_answer")          # compiles fine; only its answer is wrong
    reps = compile_matrix(cand, list(TARGET_ARCHS), [8], cache_root=cache_root)
    assert [r.arch for r in reps] == list(TARGET_ARCHS)
    for r in reps:
        assert r.verdict is Verdict.OK, (r.arch, r.message, r.diagnostics)
        assert r.compile_s > 0          # (the CLI test may have warmed the shared session cache)
        assert r.max_registers and r.max_registers > 0
        assert r.global_loads_by_bits == {} or r.global_load_128b_share is not None
    t0 = time.perf_counter()
    hit = compile_candidate(cand, "sm_90a", 8, cache_root=cache_root)
    elapsed = time.perf_counter() - t0
    assert hit.cache_hit and hit.verdict is Verdict.OK and elapsed < 1.0   # milliseconds when idle
    assert hit.compile_s == reps[0].compile_s         # the stored report, not a recompile


def test_broken_kernel_is_a_compile_error_with_trimmed_diagnostics(make_fixture, cache_root):
    cand = make_fixture("broken")
    reps = compile_matrix(cand, list(TARGET_ARCHS), [8], cache_root=cache_root)
    for r in reps:
        assert r.verdict is Verdict.COMPILE_ERROR, r.message
        assert "no_such_intrinsic" in r.message + r.diagnostics
        assert "\x1b[" not in r.diagnostics and len(r.diagnostics) <= 6100
    assert "kernel.py line" in reps[0].diagnostics
    again = compile_candidate(cand, "sm_100a", 8, cache_root=cache_root)
    assert again.cache_hit and again.verdict is Verdict.COMPILE_ERROR


@pytest.mark.slow
def test_hand_written_router_compiles_for_every_arch(cache_root):
    cand = next(c for c in list_candidates("moe_router") if c.provenance.author == "human")
    for r in compile_matrix(cand, list(TARGET_ARCHS), [8], cache_root=cache_root):
        assert r.verdict is Verdict.OK, (r.arch, r.message)
        assert r.global_load_128b_share and r.global_load_128b_share > 0.5


def test_ptx_load_widths():
    ptx = """
    ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1];
    ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd2];
    ld.global.f32 %f5, [%rd3];
    ld.global.v2.b64 {%rd4, %rd5}, [%rd6];
    ld.global.b16 %rs1, [%rd7];
    ld.shared.v4.f32 {%f1, %f2, %f3, %f4}, [%r9];
    """
    assert ptx_global_loads(ptx) == {"128": 3, "32": 1, "16": 1}


def test_ptxas_parser_reads_wrapped_remarks():
    text = ("\x1b[96mremark[ptxas]:\x1b[0m ptxas output:\n   ptxas info    : Compiling entry function\n"
            "   'kern_0' for 'sm_90a'\n ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill\n"
            "   loads\n ptxas info    : Used 40 registers, used 1 barriers\n")
    assert parse_ptxas(text) == [{"kernel": "kern_0", "arch": "sm_90a", "registers": 40, "stack_bytes": 8,
                                  "spill_store_bytes": 4, "spill_load_bytes": 12}]


@pytest.mark.parametrize("archs, tps, message", [(None, [7], "TP 7 is not supported"),
                                                 (["sm_75"], None, "unknown arch 'sm_75'")])
def test_compile_matrix_refuses_a_tp_or_arch_outside_the_catalogue(archs, tps, message, tmp_path):
    """TP7 used to compile (and be cached) as if it were a K3 per-rank shape; nothing is compiled."""
    from harness.errors import UserError

    cand = list_candidates("moe_router")[0]
    with pytest.raises(UserError, match=message):
        compile_matrix(cand, archs, tps, cache_root=tmp_path)
    assert not any(tmp_path.iterdir())
