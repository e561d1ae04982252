"""The `lpipe` knob of the swap-AB GEMM template (prompts/kernels/_shared/_swapab_pipe.j2, session 58):
the B <= 64 kernel as a pipelined tile GEMM (SkinnyGemmPipe), checked on the CPU.

- its partition (pipe_plan / pipe_rank_blocks / pipe_out_pos, the functions the kernel traces) visits
  every K block once and stores every output once, at every K3 shape and both TPs, and fits the H100's
  shared memory;
- its sums, emulated in that order (each rank's fp32 partial, ranks summed in order), match the reference;
- the PTX: the ring's cp.async copies, commit groups and waits, 16-byte shared-memory fragment loads,
  the MMA count of a stage, no local memory; the small kernel is the base's, instruction for instruction;
- it compiles for sm_90a and sm_103a without spills.
- lp_tclass (session 59): one unguarded main loop per token-tile class, the classes following small_m
  and lp_from, the same MMAs per block into each accumulator (so the emulated sums still hold);
  lp_xgroup splits a class's x loads; lp_minctas sets ptxas's launch bound; lp_tma fills the ring from a
  producer warp by TMA on mbarriers (the copies, mbarriers and barriers in the PTX); lp_midpipe (session 61)
  runs B up to lp_from on a second pipe kernel filled by cp.async (SkinnyGemmPipeMid), lp_tma's above;
  lp_mid_stages / lp_mid_sblocks (session 63) give that twin its own ring;
The GPU checks the sums of the real kernel (bench_kernels.py's correctness check, numerics_unit; and
the two -m gpu tests here, at every token-tile class edge).
"""
from __future__ import annotations

import re
import tempfile
from functools import lru_cache
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point
from reference_impls.skinny_gemm import SHAPE_NAMES, gemm_kn

from kernel_helpers import (ROOT, k_block_sums, load_module, ptx_entries_by_name, source_ptx, swapab_source_kernels,
                            variant_source, without_kernel_ids)

BASE = "072140b6c70e"             # promoted at dense_down TP8 (B 1..8): bulk + TMA, 4 warps
SMEM_MAX_BYTES = 227 * 1024       # dynamic shared memory a CTA may use on sm_90
# (lp_warps, lp_mtiles, lp_stages, lp_sblocks, lp_ctas, lp_cluster): the default and the corners of the
# space (8 warps of 2 m-tiles: 256 rows a CTA; 4-block stages; 2 CTAs an SM; no cluster). 4 m-tiles a
# warp is outside it: 255 registers and 176 bytes of spills on sm_103a at kda_in_proj.
KNOBS = [(4, 2, 4, 2, 132, 8), (8, 1, 4, 2, 132, 8), (2, 1, 6, 1, 132, 2), (8, 2, 3, 2, 132, 8),
         (4, 2, 3, 4, 132, 8), (4, 2, 3, 2, 264, 8), (2, 1, 2, 1, 264, 1)]


def _committed_small_ptx() -> str:
    """The committed BASE's small kernel (dense_down TP8), ids masked: every lpipe render must keep it."""
    small, _ = swapab_source_kernels((ROOT / "kernels_generated/skinny_gemm" / BASE / "kernel.py").read_text(),
                                     8, "dense_down")
    return without_kernel_ids(small)


def _over(knobs: tuple) -> dict:
    w, mt, st, sb, ctas, cl = knobs
    return dict(lpipe=True, lp_warps=w, lp_mtiles=mt, lp_stages=st, lp_sblocks=sb, lp_ctas=ctas, lp_cluster=cl)


@lru_cache(maxsize=None)
def _module(knobs: tuple):
    d = Path(tempfile.mkdtemp(prefix="swapab-pipe-"))
    (d / "kernel.py").write_text(variant_source("skinny_gemm", BASE, **_over(knobs)))
    return load_module(d / "kernel.py", f"swapab_pipe_{'_'.join(map(str, knobs))}")


def test_off_renders_the_committed_kernel():
    """lpipe off (its default) renders the base byte for byte, whatever the lp_* knobs say."""
    committed = (ROOT / "kernels_generated/skinny_gemm" / BASE / "kernel.py").read_text()
    assert variant_source("skinny_gemm", BASE, lpipe=False) == committed
    assert variant_source("skinny_gemm", BASE, lpipe=False, lp_warps=8, lp_stages=6) == committed


@pytest.mark.parametrize("knobs", KNOBS, ids=str)
def test_every_k_block_once_every_output_once_and_the_smem_fits(knobs):
    m = _module(knobs)
    for tp in (8, 16):
        for shape in SHAPE_NAMES:
            k, n = gemm_kn(shape, tp)
            p = m.pipe_plan(k, n)
            assert 1 <= p.ck <= m.PIPE_MAX_CLUSTER and p.n_blocks * m.PIPE_ROWS >= n > (p.n_blocks - 1) * m.PIPE_ROWS
            seen = torch.zeros(p.kbt, dtype=torch.int32)
            for rank in range(p.ck):
                for blk in m.pipe_rank_blocks(p, rank):
                    seen[blk] += 1
            assert bool((seen == 1).all()), (shape, tp)
            assert m.pipe_smem_bytes(p) <= SMEM_MAX_BYTES, (shape, tp, m.pipe_smem_bytes(p))
    # one 8-token tile of one CTA: every (row, token) stored by exactly one (warp, lane, slot)
    hits = torch.zeros(m.PIPE_ROWS, 8, dtype=torch.int32)
    for warp in range(m.PIPE_WARPS):
        for idx in range(m.PIPE_FRAG):
            for ln in range(32):
                dr, dt = m.pipe_out_pos(warp, idx, ln)
                hits[dr, dt] += 1
    assert bool((hits == 1).all())


def _emulate(m, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """SkinnyGemmPipe's sums: per rank an fp32 partial over its K blocks in order (lane k reads
    column 8t + 4s + q of a block: each once), the ranks' partials summed in rank order, one bf16
    rounding. Rows past N are never stored."""
    p = m.pipe_plan(x.shape[1], w.shape[0])
    return k_block_sums(x, w, (m.pipe_rank_blocks(p, rank) for rank in range(p.ck))).to(torch.bfloat16)


@pytest.mark.parametrize("knobs", KNOBS[:3], ids=str)
@pytest.mark.parametrize("shape,tp,batch", [("kda_in_proj", 8, 64), ("kda_in_proj", 16, 17), ("dense_down", 16, 33),
                                            ("kda_f_b", 16, 64), ("mla_q_b", 16, 9), ("shared_down", 8, 40)])
def test_emulated_sums_match_the_reference(knobs, shape, tp, batch):
    m = _module(knobs)
    defn = reference_impls.get("skinny_gemm")
    inputs = defn.make_inputs(Point(tp=tp, batch=batch, shape=shape), torch.Generator().manual_seed(batch), "cpu")
    res = compare(defn, {"out": _emulate(m, inputs["x"], inputs["weight"])}, defn.run_reference(inputs))
    assert res.ok, res.summary()


@pytest.mark.parametrize("knobs", [KNOBS[0], KNOBS[4]], ids=str)
def test_the_ptx_streams_a_ring_and_leaves_the_small_kernel_alone(knobs):
    m = _module(knobs)
    src = variant_source("skinny_gemm", BASE, **_over(knobs))
    small, pipe = swapab_source_kernels(src, 8, "dense_down")
    names = list(ptx_entries_by_name(source_ptx(src, 8, "dense_down")))
    assert sum("SkinnyGemmPipe" in n for n in names) == 1 and not any("SkinnyGemmLarge" in n for n in names), names
    base_small, _ = swapab_source_kernels(variant_source("skinny_gemm", BASE, **_over(KNOBS[0])), 8, "dense_down")
    assert without_kernel_ids(small) == _committed_small_ptx() == without_kernel_ids(base_small)
    k, n = gemm_kn("dense_down", 8)
    p = m.pipe_plan(k, n)
    per_stage = (m.PIPE_ROWS + m.LARGE_M) * 4 * m.PIPE_SB // m.PIPE_THREADS       # 16-byte copies a thread
    issued = min(m.PIPE_STAGES - 1, p.nst) + 1                                    # prologue stages + the loop's
    assert pipe.count("cp.async.cg.shared.global") == issued * per_stage
    assert pipe.count("cp.async.commit_group") == m.PIPE_STAGES                   # one a prologue stage, one a loop trip
    assert pipe.count("cp.async.wait_group") == 2                                 # the loop's, and the drain
    # a stage's fragments: 2 weight vectors an m-tile and one x vector a token tile, per block
    assert pipe.count("ld.shared.v4") == m.PIPE_SB * (2 * m.PIPE_MT + m.PIPE_NT)
    assert pipe.count("mma.sync.aligned.m16n8k16") == m.PIPE_SB * m.PIPE_MT * m.PIPE_NT * 2
    assert "ld.local" not in pipe and "st.local" not in pipe
    assert pipe.count("barrier.cluster.arrive") == (2 if p.ck > 1 else 0)


RAGGED_SHAPES = ["kda_in_proj", "mla_qkv_a", "kda_f_b", "dense_down"]   # N 6288 and 2112, K 128 on one rank, the widest K split


def _compiled_pipes(arch: str, params: dict, shapes: list[str], root: Path, base: str = BASE, pipes: int = 1) -> list:
    """Compile a render of `base` with `params` for `arch` at TP8 and each shape (through the toolchain's
    sandboxed compile, as the gates do); each report compiled, with no spills and exactly `pipes`
    SkinnyGemmPipe kernels (2 with lp_midpipe's twin). Returns the reports."""
    import sys

    from harness.toolchain.compile import compile_many
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_variant import render_variant

    cand = render_variant("skinny_gemm", base, params, root=root, scope_sets={"tp": [8, 16], "shapes": shapes})
    reps = list(compile_many(cand, [(arch, 8, {"shape": s}) for s in shapes]))
    for rep in reps:
        assert rep.ok, f"{rep.message}\n{rep.diagnostics[-2000:]}"
        pipe = [k for k in rep.kernels if "SkinnyGemmPipe" in k.kernel]
        assert len(pipe) == pipes and rep.spill_bytes == 0, rep.kernels
    assert len(reps) == len(shapes)
    return reps


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_compiles_without_spills_with_16_byte_loads(arch, tmp_path):
    """The default (4 warps of 2 m-tiles) and 8 warps of 2 (256 rows a CTA), at every ragged edge."""
    for knobs in (KNOBS[0], KNOBS[3]):
        for rep in _compiled_pipes(arch, _over(knobs), RAGGED_SHAPES, tmp_path):
            assert set(rep.global_loads_by_bits) == {"128"}, rep.global_loads_by_bits


def test_lp_from_keeps_the_loop_kernel_for_the_batches_up_to_it(tmp_path):
    """lp_from 16: three kernels (the small one, the loop's B <= 64 kernel, SkinnyGemmPipe), and the
    dispatch runs the loop's up to B = 16, the pipe above; lp_from 0 (the default) renders two."""
    assert "SmallMidLarge" not in variant_source("skinny_gemm", BASE, **_over(KNOBS[0]))
    src = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), lp_from=16)
    names = list(ptx_entries_by_name(source_ptx(src, 8, "dense_down")))
    assert len(names) == 3 and sum("SkinnyGemmLarge" in n for n in names) == 1 \
        and sum("SkinnyGemmPipe" in n for n in names) == 1, names
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", "swapab_pipe_lp_from")
    calls = []
    dispatch = m.SmallMidLarge(*(lambda x, w, o, tag=tag: calls.append(tag) for tag in ("small", "loop", "pipe")))
    for batch in (1, 8, 9, 16, 17, 64):
        dispatch(torch.empty(batch, 32), None, None)
    assert calls == ["small", "small", "loop", "loop", "pipe", "pipe"]


TCLASS = dict(lp_tclass=True)
PLAN_5E5B0F = (4, 1, 3, 2, 396, 8)          # session 58's best lpipe plan (the _b64_pipe points'): 4 warps of 1 m-tile


def _gpu_matches_reference_at_class_edges(src: str, name: str, shapes: tuple[str, ...], tmp_path: Path) -> None:
    """The rendered kernel against the reference at TP8 and each class's first and last B (9 and 16, 17 and
    32, 33 and 64), outputs poisoned first."""
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", name)
    defn = reference_impls.get("skinny_gemm")
    for shape in shapes:
        compiled = m.compile(8, "--enable-tvm-ffi", shape=shape)
        for batch in (9, 16, 17, 32, 33, 64):
            point = Point(batch=batch, tp=8, shape=shape)
            inp = defn.make_inputs(point, torch.Generator().manual_seed(batch), "cuda")
            outs = defn.alloc_outputs(point, "cuda", poison=True)
            m.launch(compiled, **inp, **outs)
            torch.cuda.synchronize()
            res = compare(defn, outs, defn.run_reference(inp), inp)
            assert res.ok, f"{shape} B={batch}: {res.summary()}"


@pytest.mark.parametrize("lp_from,classes", [(0, (8, 4, 2)), (16, (8, 4)), (32, (8,))])
def test_tclass_builds_one_unguarded_main_loop_per_token_tile_class(lp_from, classes, tmp_path):
    """The classes start at the B the pipe kernel first sees (small_m 8, or lp_from): a class of c
    tiles runs B up to 8c. Per block every class loop loads the m-tiles' weight vectors and one x
    vector a tile, and runs two MMAs a tile and m-tile: the MMAs that reach an accumulator are the
    guarded loop's, in its order (k-step 0, then 1, block by block)."""
    src = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS, lp_from=lp_from)
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", f"swapab_tclass_{lp_from}")
    assert m.PIPE_TCLASSES == classes
    # the branch on B before the loops: B > 8 x (next class) runs this class
    thresholds = [int(x) for x in re.findall(r"(?:el)?if M > (\d+):", src)]
    assert thresholds == [8 * c for c in classes[1:]]
    _, pipe = swapab_source_kernels(src, 8, "dense_down")
    assert pipe.count("mma.sync.aligned.m16n8k16") == m.PIPE_SB * m.PIPE_MT * 2 * sum(classes)
    assert pipe.count("ld.shared.v4") == m.PIPE_SB * (2 * m.PIPE_MT * len(classes) + sum(classes))
    assert "ld.local" not in pipe and "st.local" not in pipe
    # the small kernel is still the base's
    small, _ = swapab_source_kernels(src, 8, "dense_down")
    assert without_kernel_ids(small) == _committed_small_ptx()


def test_tclass_off_and_its_helpers_off_render_the_session_58_pipe():
    """lp_tclass false (the default) ignores lp_xgroup; lp_xgroup 0 renders lp_tclass's loop as
    session 59's bench ran it (all of a class's x vectors first)."""
    plain = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]))
    assert variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), lp_xgroup=4) == plain
    assert "PIPE_TCLASSES" not in plain and "min_blocks_per_mp" not in plain
    tc = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS)
    assert variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS, lp_xgroup=0) == tc
    assert "for n0 in" not in tc and "for n0 in" in variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS,
                                                                   lp_xgroup=4)


def _block_runs(ptx: str) -> list[tuple[str, int]]:
    """The kernel's shared-memory vector loads (L) and MMAs (M) in PTX order, as runs."""
    from itertools import groupby

    seq = ["L" if "ld.shared.v4" in ln else "M" for ln in ptx.splitlines() if "ld.shared.v4" in ln or "mma.sync" in ln]
    return [(k, len(list(v))) for k, v in groupby(seq)]


@pytest.mark.parametrize("xgroup", [0, 2, 4])
def test_xgroup_loads_a_few_tiles_x_at_a_time_with_the_same_mmas(xgroup):
    """lp_xgroup g: a class's x vectors in groups of g tiles, each group's MMAs before the next
    group's loads (fewer live registers); 0: all of them first. Per block of a class of c tiles:
    the m-tiles' weight vectors and the first group's x, its MMAs, then each further group's x and
    its MMAs; each class's loop holds PIPE_SB such blocks."""
    src = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS, lp_from=16, lp_xgroup=xgroup)
    _, pipe = swapab_source_kernels(src, 8, "dense_down")
    mt, sb = KNOBS[0][1], KNOBS[0][3]
    blocks = {}
    for c in (8, 4):
        g = min(xgroup or c, c)
        blocks[c] = [("L", 2 * mt + g), ("M", 2 * mt * g)] + [("L", g), ("M", 2 * mt * g)] * (c // g - 1)
    runs, seen = _block_runs(pipe), []
    while runs:                                      # the class loops in whichever order the PTX has them
        c = next((c for c, b in blocks.items() if runs[:len(b)] == b), None)
        assert c is not None, f"no class's block pattern at {runs[:8]} (expected one of {blocks})"
        seen.append(c)
        runs = runs[len(blocks[c]):]
    assert sorted(seen) == sorted([8] * sb + [4] * sb)


def test_minctas_sets_the_launch_bound():
    src = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS, lp_minctas=3)
    assert "min_blocks_per_mp=PIPE_MINCTAS, preferred_smem_carveout=100" in src
    _, pipe = swapab_source_kernels(src, 8, "dense_down")
    assert ".minnctapersm 3" in pipe


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_tclass_plans_compile_without_spills(arch, tmp_path):
    """Session 59's timed plan (5e5b0f's knobs + lp_tclass, lp_from 16) at the shapes of its three
    replacement points, and lp_xgroup 4, which keeps the pipe kernel at 128 registers (4 CTAs an SM
    of 128 threads; all 8 tiles' x at once needs about 156)."""
    plan_5e5b0f = dict(_over(PLAN_5E5B0F), lp_from=16, **TCLASS)
    for xgroup, max_regs in ((0, 168), (4, 128)):
        for rep in _compiled_pipes(arch, dict(plan_5e5b0f, lp_xgroup=xgroup), ["latent_down", "dense_down", "mla_q_b"],
                                   tmp_path):
            pipe = next(k for k in rep.kernels if "SkinnyGemmPipe" in k.kernel)
            assert pipe.registers <= max_regs, (xgroup, pipe.registers)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_tclass_matches_the_reference_at_every_class_edge(tmp_path):
    """lp_tclass with lp_xgroup 4 at each class's edges."""
    src = variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F), **TCLASS, lp_xgroup=4)
    _gpu_matches_reference_at_class_edges(src, "swapab_tclass_gpu", ("dense_down", "mla_q_b"), tmp_path)


TMA = dict(lp_tclass=True, lp_tma=True)


@pytest.mark.parametrize("knobs", [KNOBS[0], KNOBS[1], KNOBS[6]], ids=str)
def test_tma_ring_is_filled_by_a_producer_warp_on_mbarriers(knobs, tmp_path):
    """lp_tma: one more warp a CTA; it issues one TMA copy a block of W and one of x (2 x PIPE_SB a
    stage, in one loop), on per-slot full mbarriers (count 1) and waits on per-slot empty ones (one
    arrive a consumer warp). The consumers' class loops wait on full and arrive on empty, with no
    CTA barrier a stage and no cp.async. The MMAs and fragment loads are lp_tclass's."""
    src = variant_source("skinny_gemm", BASE, **_over(knobs), **TMA)
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", f"swapab_tma_{'_'.join(map(str, knobs))}")
    assert m.PIPE_THREADS == 32 * (m.PIPE_WARPS + 1)
    _, pipe = swapab_source_kernels(src, 8, "dense_down")
    tc = variant_source("skinny_gemm", BASE, **_over(knobs), **TCLASS)
    _, pipe_tc = swapab_source_kernels(tc, 8, "dense_down")
    n_classes = len(m.PIPE_TCLASSES)
    assert pipe.count("cp.async.bulk.tensor") == 2 * m.PIPE_SB
    assert "cp.async.cg" not in pipe and "cp.async.commit_group" not in pipe
    assert pipe.count("mbarrier.init") == 2 * m.PIPE_STAGES
    assert pipe.count("mbarrier.try_wait") == 1 + n_classes            # the producer's empty, each class's full
    assert pipe.count("mbarrier.arrive.expect_tx") == 1
    k, n = gemm_kn("dense_down", 8)
    # CTA barriers: after the mbarrier inits, and before the partials reuse the ring (cluster plans)
    assert pipe.count("bar.sync") == 1 + (m.pipe_plan(k, n).ck > 1)
    for op in ("mma.sync.aligned.m16n8k16", "ld.shared.v4"):
        assert pipe.count(op) == pipe_tc.count(op), op
    assert "ld.local" not in pipe and "st.local" not in pipe


def test_tma_works_with_the_guarded_loop_too():
    """lp_tma without lp_tclass: one consumer loop (the session-58 body, a guard a token tile) fed by
    the same producer warp."""
    src = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), lp_tma=True)
    _, pipe = swapab_source_kernels(src, 8, "dense_down")
    _, pipe_plain = swapab_source_kernels(variant_source("skinny_gemm", BASE, **_over(KNOBS[0])), 8, "dense_down")
    assert pipe.count("cp.async.bulk.tensor") == 2 * KNOBS[0][3] and "cp.async.cg" not in pipe
    assert pipe.count("mbarrier.try_wait") == 2                         # the producer's empty, the loop's full
    for op in ("mma.sync.aligned.m16n8k16", "ld.shared.v4"):
        assert pipe.count(op) == pipe_plain.count(op), op


def test_tma_off_renders_lp_tclass_as_before():
    tc = variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS)
    assert variant_source("skinny_gemm", BASE, **_over(KNOBS[0]), **TCLASS, lp_tma=False) == tc
    pipe_src = tc.split("class SkinnyGemmPipe")[1]
    assert "mbarrier" not in pipe_src and "make_tiled_tma_atom" not in pipe_src


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_tma_plans_compile_without_spills(arch, tmp_path):
    """5e5b0f's plan with lp_tma at every ragged edge."""
    _compiled_pipes(arch, dict(_over(PLAN_5E5B0F), **TMA, lp_xgroup=4), RAGGED_SHAPES, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cluster", [8, 1], ids=["cluster", "no_cluster"])
def test_gpu_tma_matches_the_reference_at_every_class_edge(cluster, tmp_path):
    """lp_tma at each class's first and last B, with a split-K cluster and without (the producer warp
    must hold no output), at a ragged N (mla_qkv_a: 2112 rows, 33 CTAs of 64) and dense_down."""
    src = variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F[:5] + (cluster,)), **TMA, lp_xgroup=4)
    _gpu_matches_reference_at_class_edges(src, f"swapab_tma_gpu_{cluster}", ("dense_down", "mla_qkv_a"), tmp_path)


MIDPIPE = dict(lp_tclass=True, lp_tma=True, lp_from=32, lp_midpipe=True)


def test_midpipe_runs_a_cp_async_twin_up_to_lp_from_and_lp_tma_above(tmp_path):
    """lp_midpipe (session 61) with lp_from 32 and lp_tma: three kernels. B 9..32 runs SkinnyGemmPipeMid,
    the cp.async ring (no producer warp, no TMA, no mbarrier) with lp_tclass's loops for 4 and 2 token
    tiles; B 33..64 runs SkinnyGemmPipe, lp_tma's producer warp with the 8-tile loop. Each kernel's MMAs
    and fragment loads are those of its classes; the small kernel is still the base's."""
    src = variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F), **MIDPIPE)
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", "swapab_midpipe")
    assert m.PIPE_FROM == 32 and m.PIPE_TCLASSES == (8,) and m.PIPE_MID_TCLASSES == (4, 2)
    assert m.PIPE_THREADS == 32 * (m.PIPE_WARPS + 1) and m.PIPE_MID_THREADS == 32 * m.PIPE_WARPS
    entries = ptx_entries_by_name(source_ptx(src, 8, "dense_down"))
    mid = [b for n, b in entries.items() if "SkinnyGemmPipeMid" in n]
    assert len(entries) == 3 and len(mid) == 1, list(entries)
    mid = mid[0]
    small, pipe = swapab_source_kernels(src, 8, "dense_down")
    assert without_kernel_ids(small) == _committed_small_ptx()
    assert "cp.async.cg" in mid and "cp.async.bulk.tensor" not in mid and "mbarrier" not in mid
    assert pipe.count("cp.async.bulk.tensor") == 2 * m.PIPE_SB and "cp.async.cg" not in pipe
    for body, classes in ((mid, (4, 2)), (pipe, (8,))):
        assert body.count("mma.sync.aligned.m16n8k16") == m.PIPE_SB * m.PIPE_MT * 2 * sum(classes)
        assert body.count("ld.shared.v4") == m.PIPE_SB * (2 * m.PIPE_MT * len(classes) + sum(classes))
        assert "ld.local" not in body and "st.local" not in body
    calls = []
    dispatch = m.SmallMidLarge(*(lambda x, w, o, tag=tag: calls.append(tag) for tag in ("small", "mid", "pipe")))
    for batch in (1, 8, 9, 16, 17, 32, 33, 64):
        dispatch(torch.empty(batch, 32), None, None)
    assert calls == ["small", "small", "mid", "mid", "mid", "mid", "pipe", "pipe"]


@pytest.mark.parametrize("lp_from,classes", [(16, (2,)), (32, (4, 2))])
def test_midpipe_classes_are_those_of_the_batches_it_runs(lp_from, classes):
    """The twin's loops cover B = small_m + 1 .. lp_from: one class (no branch) at lp_from 16."""
    src = variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F), **dict(MIDPIPE, lp_from=lp_from))
    assert f"PIPE_MID_TCLASSES = ({', '.join(map(str, classes))},)" in src
    mid_src = src.split("class SkinnyGemmPipeMid")[1].split("def _compile_pipe_mid")[0]
    assert [int(x) for x in re.findall(r"(?:el)?if M > (\d+):", mid_src)] == [8 * c for c in classes[1:]]
    assert "mbarrier" not in mid_src and "make_tiled_tma_atom" not in mid_src


def test_midpipe_off_or_without_lp_from_renders_as_before():
    """lp_midpipe false (the default), or lp_from 0 (no mid kernel to replace), renders byte for byte what
    the knob's absence did: every committed lpipe point stays as it is (test_rerender checks those)."""
    for extra in (dict(lp_tma=True, lp_from=32), dict(lp_tma=True, lp_from=0), dict(lp_from=16)):
        def render(**midpipe):
            return variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F), **TCLASS, **extra, **midpipe)
        base = render()
        assert render(lp_midpipe=False) == base
        if extra["lp_from"] == 0:
            assert render(lp_midpipe=True) == base
        assert "SkinnyGemmPipeMid" not in base


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_midpipe_compiles_both_pipes_without_spills(arch, tmp_path):
    """ab4820's plan (b233cc's with lp_tclass) with lp_from 32, lp_tma and lp_midpipe at its four shapes:
    both pipe kernels compile with no spills and 16-byte global loads only. (Not the ragged edges:
    ab4820's small kernel, 072140's, spills 12 bytes on sm_103a at kda_f_b, outside its scope.)"""
    shapes = ["dense_down", "kda_o_proj", "mla_o_proj", "mla_q_b"]
    for rep in _compiled_pipes(arch, {"lp_tma": True, "lp_from": 32, "lp_midpipe": True}, shapes, tmp_path,
                               base="ab4820", pipes=2):
        assert set(rep.global_loads_by_bits) <= {"128"}, rep.global_loads_by_bits


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_midpipe_matches_the_reference_at_every_class_edge(tmp_path):
    """Both pipes at each class's first and last B (9..32 the twin, 33..64 lp_tma's kernel), at a ragged N."""
    src = variant_source("skinny_gemm", BASE, **_over(PLAN_5E5B0F), **MIDPIPE, lp_xgroup=4)
    _gpu_matches_reference_at_class_edges(src, "swapab_midpipe_gpu", ("dense_down", "mla_qkv_a"), tmp_path)


# lp_mid_stages / lp_mid_sblocks (session 63): the twin's own ring. Session 62's study: lp_tma's kernel was
# fastest at B=64 on 4 stages of 1 block (303c81), the cp.async twin on ab4820's 3 of 2 (fd626c); shared
# knobs gave the twin the deeper ring too (778419, slower). This point takes each kernel's best ring.
RING_TMA = dict(lp_tma=True, lp_from=32, lp_midpipe=True, lp_stages=4, lp_sblocks=1)
MID_RING = dict(lp_mid_stages=3, lp_mid_sblocks=2)


def _class_src(src: str, cls: str) -> str:
    """The text of class `cls` of a render, through its compile function."""
    comp = {"SkinnyGemmPipeMid": "def _compile_pipe_mid", "SkinnyGemmPipe": "def _compile_pipe("}[cls]
    return f"class {cls}:" + src.split(f"class {cls}:")[1].split(comp)[0]


def test_mid_ring_knobs_unset_or_without_midpipe_render_as_before():
    """0 (the default) keeps the twin on lp_stages / lp_sblocks, byte for byte; without lp_midpipe (no
    twin) the knobs change nothing. test_rerender checks every committed point."""
    def render(**kw):
        return variant_source("skinny_gemm", "ab4820525c8e", **kw)
    assert render(**RING_TMA, lp_mid_stages=0, lp_mid_sblocks=0) == render(**RING_TMA)
    no_twin = dict(RING_TMA, lp_midpipe=False)
    assert render(**no_twin, **MID_RING) == render(**no_twin)
    assert "PIPE_MID_STAGES" not in render(**RING_TMA)


def test_mid_ring_gives_the_twin_its_own_ring_and_plan(tmp_path):
    """With lp_mid_*, SkinnyGemmPipeMid is the twin of the render whose shared ring is lp_mid_*'s (fd626c's),
    its ring constants renamed; SkinnyGemmPipe is the lp_tma kernel of the render whose shared ring is
    lp_stages / lp_sblocks'. Each plan (the twin's with PIPE_MID_SB) visits every K block once and fits
    the shared memory, at every shape and TP."""
    src = variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA, **MID_RING)
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", "swapab_mid_ring")
    assert (m.PIPE_STAGES, m.PIPE_SB, m.PIPE_MID_STAGES, m.PIPE_MID_SB) == (4, 1, 3, 2)
    assert m.PIPE_MID_RING_BYTES == 3 * 2 * (m.PIPE_ROWS + m.LARGE_M) * 64 != m.PIPE_RING_BYTES
    twin_of = variant_source("skinny_gemm", "ab4820525c8e", **dict(RING_TMA, lp_stages=3, lp_sblocks=2))
    renamed = _class_src(twin_of, "SkinnyGemmPipeMid")
    for old, new in (("PIPE_STAGES", "PIPE_MID_STAGES"), ("PIPE_SB", "PIPE_MID_SB"),
                     ("PIPE_W_ELEMS", "PIPE_MID_W_ELEMS"), ("pipe_smem_bytes", "pipe_mid_smem_bytes")):
        renamed = re.sub(rf"\b{old}\b", new, renamed)
    assert _class_src(src, "SkinnyGemmPipeMid") == renamed
    assert _class_src(src, "SkinnyGemmPipe") == _class_src(variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA),
                                                           "SkinnyGemmPipe")
    assert "_compile_pipe_mid(pipe_plan(k, n, PIPE_MID_SB), options)" in src
    differs = 0
    for tp in (8, 16):
        for shape in SHAPE_NAMES:
            k, n = gemm_kn(shape, tp)
            for p, sb, smem in ((m.pipe_plan(k, n), m.PIPE_SB, m.pipe_smem_bytes),
                                (m.pipe_plan(k, n, m.PIPE_MID_SB), m.PIPE_MID_SB, m.pipe_mid_smem_bytes)):
                assert p.nst == -(-p.kb // sb)
                seen = torch.zeros(p.kbt, dtype=torch.int32)
                for rank in range(p.ck):
                    for blk in m.pipe_rank_blocks(p, rank, sb):
                        seen[blk] += 1
                assert bool((seen == 1).all()), (shape, tp, sb)
                assert smem(p) <= SMEM_MAX_BYTES
            differs += m.pipe_plan(k, n) != m.pipe_plan(k, n, m.PIPE_MID_SB)
    assert differs == 2 * len(SHAPE_NAMES)          # every twin plan streams 2-block stages, half as many


@pytest.mark.parametrize("shape,tp,batch", [("kda_f_b", 8, 9), ("dense_down", 8, 32), ("mla_qkv_a", 16, 17)])
def test_mid_ring_emulated_sums_match_the_reference(shape, tp, batch, tmp_path):
    """The twin's sums in its own plan's order (kda_f_b: one rank where the lp_tma kernel's plan has two)."""
    src = variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA, **MID_RING)
    (tmp_path / "kernel.py").write_text(src)
    m = load_module(tmp_path / "kernel.py", f"swapab_mid_ring_{shape}_{tp}")
    defn = reference_impls.get("skinny_gemm")
    inputs = defn.make_inputs(Point(tp=tp, batch=batch, shape=shape), torch.Generator().manual_seed(batch), "cpu")
    p = m.pipe_plan(inputs["x"].shape[1], inputs["weight"].shape[0], m.PIPE_MID_SB)
    out = k_block_sums(inputs["x"], inputs["weight"], (m.pipe_rank_blocks(p, r, m.PIPE_MID_SB) for r in range(p.ck)))
    res = compare(defn, {"out": out.to(torch.bfloat16)}, defn.run_reference(inputs))
    assert res.ok, res.summary()


def test_mid_ring_ptx_streams_each_kernel_through_its_own_ring():
    """The twin's PTX is fd626c-like's twin instruction for instruction (3 slots of 2 blocks: cp.async
    groups, fragment loads and MMAs of 2 blocks a stage); the lp_tma kernel copies 1 block a stage."""
    src = variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA, **MID_RING)
    twin_of = variant_source("skinny_gemm", "ab4820525c8e", **dict(RING_TMA, lp_stages=3, lp_sblocks=2))
    kernels = {}
    for tag, s in (("new", src), ("twin_of", twin_of), ("tma_of", variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA))):
        entries = ptx_entries_by_name(source_ptx(s, 8, "dense_down"))
        kernels[tag] = {c: without_kernel_ids(next(b for n, b in entries.items() if c in n and (c != "SkinnyGemmPipe" or "Mid" not in n)))
                        for c in ("SkinnyGemmPipeMid", "SkinnyGemmPipe")}
    assert kernels["new"]["SkinnyGemmPipeMid"] == kernels["twin_of"]["SkinnyGemmPipeMid"]
    assert kernels["new"]["SkinnyGemmPipe"] == kernels["tma_of"]["SkinnyGemmPipe"]
    mid, pipe = kernels["new"]["SkinnyGemmPipeMid"], kernels["new"]["SkinnyGemmPipe"]
    assert mid.count("mma.sync.aligned.m16n8k16") == 2 * 1 * 2 * (4 + 2)       # SB 2, 1 m-tile, 2 k-steps, 4 + 2 tiles
    assert pipe.count("mma.sync.aligned.m16n8k16") == 1 * 1 * 2 * 8             # SB 1, the 8-tile class
    assert pipe.count("cp.async.bulk.tensor") == 2 * 1 and "cp.async.cg" not in pipe


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90a", "sm_103a"])
def test_mid_ring_compiles_both_pipes_without_spills(arch, tmp_path):
    """ab4820 + lp_from 32, lp_tma, lp_midpipe, the lp_tma ring 4 x 1 and the twin's 3 x 2, at ab4820's four shapes."""
    params = {"lp_tma": True, "lp_from": 32, "lp_midpipe": True, "lp_stages": 4, "lp_sblocks": 1, **MID_RING}
    for rep in _compiled_pipes(arch, params, ["dense_down", "kda_o_proj", "mla_o_proj", "mla_q_b"], tmp_path,
                               base="ab4820", pipes=2):
        assert set(rep.global_loads_by_bits) <= {"128"}, rep.global_loads_by_bits


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_mid_ring_matches_the_reference_at_every_class_edge(tmp_path):
    """Both pipes on their own rings at each class's first and last B, at dense_down and a ragged N."""
    src = variant_source("skinny_gemm", "ab4820525c8e", **RING_TMA, **MID_RING)
    _gpu_matches_reference_at_class_edges(src, "swapab_mid_ring_gpu", ("dense_down", "mla_qkv_a"), tmp_path)
