"""skinny_gemm candidate: weight-streaming swap-AB tensor-core GEMM, split-K over a CTA cluster.

Rendered from prompts/kernels/skinny_gemm/swapab.py.j2 with
    m_tiles=1 warps=8 unroll=6 unroll_large=4
    ctas_target=264 max_cluster=4 small_m=8 pdl=False xlarge=True
    lpipe=True lp_warps=4 lp_mtiles=1 lp_stages=8 lp_sblocks=2 lp_ctas=396 lp_cluster=1 lp_from=32 lp_tclass=True lp_xgroup=4 lp_minctas=2 lp_tma=True lp_midpipe=True
    ALT plan for mla_qkv_a: warps=4 unroll=8 ctas_target=396 max_cluster=8 ring=True

Math (reference_impls/skinny_gemm.py): out[B, N] = x[B, K] @ W[N, K]^T, fp32 accumulate, bf16 out.
Swap-AB: mma.sync.m16n8k16 (bf16 in, fp32 accumulate) with 16 weight rows on the MMA M axis and
8 tokens on N, so every weight byte is read from HBM once for all B tokens.
Partition (plan() below, all compile-time per shape): a CTA owns ROWS = 16 * M_TILES weight rows;
grid (ceil(N / ROWS), CK) with CK CTAs of one cluster splitting K; the WARPS warps of a CTA split
its part further. K is cut into 32-wide blocks (KBT = K / 32); slice s = rank * WARPS + warp owns
blocks s*KB .. s*KB + KB - 1 (KB = ceil(KBT / (CK * WARPS)), blocks >= KBT skipped), streamed in
chunks of UNROLL blocks whose weight loads all issue before any MMA. Lane (g = lane / 4,
t = lane % 4) loads 16 contiguous bytes at k = 8t .. 8t+7 of a block for W rows g, g+8 (per
m-tile) and x token g; elements 4s .. 4s+3 feed MMA k-step s in PTX fragment order (A and B use
the same permuted k, a dot product is order-free). Rows past N read row N-1 (valid memory,
results dropped); tokens past B read token B-1 (likewise).
Reduction (deterministic): every warp writes its fp32 accumulators to shared memory; after a
cluster barrier (release/acquire) the owner CTA of each accumulator (index % CK) sums the
partials of all CK ranks (through DSMEM) and WARPS warps in (rank, warp) order and writes bf16.
Two kernels are compiled: B <= SMALL_M (one token chunk of SMALL_M) and B <= 64 (chunks of 64,
UNROLL_LARGE); launch() picks one by x.shape[0].
XLARGE (the B <= 64 kernel): each chunk's x vectors of all 8 token tiles load into registers right
behind its weights, before any MMA (the plain loop loads one tile's x, then runs its MMAs, so every
tile waits on its own L2 round trip: ncu of 072140's large kernel at dense_down TP8 B=64 on an H100,
session 57, put 81% of the warps' samples in long-scoreboard waits at the MMAs and DRAM 20% busy).
Same blocks, same order, same MMAs: the sums are bit-identical to the plain loop's.
LPIPE (the B <= 64 kernel is SkinnyGemmPipe, below, instead of SkinnyGemmLarge): a tile GEMM whose
PIPE_WARPS warps split a CTA's PIPE_ROWS weight rows and share one copy of x in shared memory, fed
through a PIPE_STAGES-slot cp.async ring of PIPE_SB K blocks a stage (session 57's ncu: the loops
above are latency-bound at B 16-64, DRAM 20-40% busy, and every CTA of 16 rows reads all of x from
L2, at B=64 four times the weight bytes). Its split-K (a cluster of CK CTAs) sums in rank order, so
its sums are deterministic but not the small kernel's order.
LP_FROM: the loop's B <= 64 kernel still runs B = SMALL_M + 1 .. PIPE_FROM, SkinnyGemmPipe the larger B
(SmallMidLarge): on the H100 the loop with xlarge was as fast or faster at B=16, lpipe at B 32-64
(session 58).
LP_MIDPIPE: B = SMALL_M + 1 .. PIPE_FROM runs SkinnyGemmPipeMid instead of the loop's kernel: the same pipe,
ring and knobs, filled by cp.async whatever lp_tma says, its loop built for 4 and 2 token tiles
(on the H100 lp_tma was fastest at B=64 and 5-15% slower than the cp.async ring at B 16-32, session 60).
LP_TCLASS: SkinnyGemmPipe's main loop is built once per token-tile class (8 tiles of 8
tokens: B <= 8 x count), one branch on B before the loop picks it, and the loop body has no guard a tile:
a block's x vectors load first, then its MMAs k-step by k-step. Guarding each tile (the default) cut a
block into a basic block a tile, each waiting on its own shared-memory load and then on its two
dependent MMAs (ncu of 5e5b0f at B=64, session 58: wait 30%, short scoreboard 16% of the stalls).
Same blocks, same MMAs into each accumulator in the same order: the sums are bit-identical. Tokens
past B in the last tile read stale shared memory into accumulators that are never stored.
LP_XGROUP: x vectors of 4 tiles at a time, then their MMAs (fewer live registers).
LP_MINCTAS: ptxas keeps the pipe kernel's registers within 2 CTAs an SM (nvvm.minctasm).
LP_TMA: a producer warp fills the ring by TMA, one 2D copy a block of W (PIPE_ROWS rows x 32) and one of x
(64 tokens x 32; boxes past N or B land as zeros), completing on the slot's `full` mbarrier; the consumer
warps wait on it, run the slot's MMAs and arrive on its `empty` mbarrier, which the producer waits on
before refilling the slot. No CTA barrier a stage (session 59's ncu: barrier 12% of the stalls, long
scoreboard 16% on the cp.async ring), and no address math for the copies in the consumers. Same
blocks, same MMAs, same order: the sums are the cp.async ring's.
ALT: the small kernel of the shapes in ALT_FOR ("shape" at every TP, "shape@tp" at one) is built
from a second plan (ALT_WARPS, ALT_UNROLL, ALT_CTAS_TARGET, ALT_MAX_CLUSTER, ALT_RING): no one
partition is fastest at every K3 shape (H200, session 15: mla_qkv_a, 132 CTAs of 16 rows, streams
best split over K-clusters with the ring, the latent GEMMs without a cluster). The plan carries
its warps, unroll and ring; the B <= 64 kernel always uses the main plan.
"""
from __future__ import annotations

from typing import NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass.cute.nvgpu import cpasync

# (K, N) of every per-rank bf16 GEMM of a K3 decode step, by TP: the kernel's own copy of the
# table (a kernel may not import the reference; tests/kernels/test_skinny_shapes.py checks it
# equals reference_impls/skinny_gemm.SHAPES). "" names latent_down.
DEFAULT_SHAPE = "latent_down"
GEMM_KN = {
    8: {"kda_in_proj": (7168, 6288), "kda_f_b": (128, 1536), "kda_o_proj": (1536, 7168),
        "mla_qkv_a": (7168, 2112), "mla_q_b": (1536, 2304), "mla_g_proj": (7168, 1536),
        "mla_o_proj": (1536, 7168), "latent_down": (7168, 3584), "shared_gate_up": (7168, 1536),
        "shared_down": (768, 7168), "latent_up": (3584, 7168), "dense_gate_up": (7168, 8448),
        "dense_down": (4224, 7168)},
    16: {"kda_in_proj": (7168, 3216), "kda_f_b": (128, 768), "kda_o_proj": (768, 7168),
         "mla_qkv_a": (7168, 2112), "mla_q_b": (1536, 1152), "mla_g_proj": (7168, 768),
         "mla_o_proj": (768, 7168), "latent_down": (7168, 3584), "shared_gate_up": (7168, 768),
         "shared_down": (384, 7168), "latent_up": (3584, 7168), "dense_gate_up": (7168, 4224),
         "dense_down": (2112, 7168)},
}


def gemm_kn(shape: str, tp: int) -> tuple[int, int]:
    """(K, N) of the named GEMM at TP `tp`."""
    kn = GEMM_KN.get(tp, {}).get(shape or DEFAULT_SHAPE)
    if kn is None:
        raise ValueError(f"no K3 GEMM '{shape}' at TP{tp}")
    return kn


VEC = 8                                   # bf16 per 16-byte load
M_TILES = 1                   # 16-row MMA tiles per CTA (every warp holds all of them)
WARPS = 8
UNROLL = 6                     # 32-col K blocks in flight per warp, small-B kernel
UNROLL_LARGE = 4         # the same for the B <= 64 kernel
CTAS_TARGET = 264           # CK grows until ceil(N / ROWS) * CK reaches this
MAX_CLUSTER = 4           # 8 = the portable cluster size limit
RING = False                               # the main plan's small kernel runs the ring
ALT_FOR = ("mla_qkv_a", )        # "shape" (every TP) or "shape@tp"
ALT_WARPS = 4
ALT_UNROLL = 8
ALT_CTAS_TARGET = 396
ALT_MAX_CLUSTER = 8
ALT_RING = True
SMALL_M = 8                   # largest B served by the small kernel (multiple of 8)
LARGE_M = 64
PDL = False
WLOAD = "pf128nol1"                           # cache hints of every weight load (ld.global qualifiers)

ROWS = 16 * M_TILES
FRAG = M_TILES * 4                        # fp32 accumulators per lane per 8-token tile
assert SMALL_M % 8 == 0 and LARGE_M % 8 == 0


class Plan(NamedTuple):
    """Compile-time partition of one (K, N)."""
    k: int
    n: int
    n_blocks: int          # CTAs along N (rows ROWS each, the last one ragged)
    ck: int                # CTAs of a cluster along K
    kbt: int               # 32-wide K blocks in total
    kb: int                # K blocks per (rank, warp) slice
    warps: int             # warps per CTA (each a K slice)
    unroll: int            # K blocks in flight per warp, small kernel
    ring: bool             # the small kernel runs the ring


def uses_alt(shape: str, tp: int) -> bool:
    """Whether the small kernel of this shape at this TP is built from the ALT plan."""
    return shape in ALT_FOR or f"{shape}@{tp}" in ALT_FOR


def plan(k: int, n: int, alt: bool = False) -> Plan:
    assert k % 32 == 0 and n % 8 == 0, (k, n)
    warps, unroll, target, max_cluster, ring = ((ALT_WARPS, ALT_UNROLL, ALT_CTAS_TARGET, ALT_MAX_CLUSTER, ALT_RING)
                                                if alt else (WARPS, UNROLL, CTAS_TARGET, MAX_CLUSTER, RING))
    n_blocks = -(-n // ROWS)
    kbt = k // 32
    ck = 1
    # a larger cluster only while the grid is short of the target and every slice keeps a block
    while ck < max_cluster and n_blocks * ck < target and 2 * ck * warps <= kbt:
        ck *= 2
    return Plan(k=k, n=n, n_blocks=n_blocks, ck=ck, kbt=kbt, kb=-(-kbt // (ck * warps)), warps=warps, unroll=unroll,
                ring=ring)


def slice_blocks(p: Plan, rank: int, warp: int, unroll: int) -> list[int]:
    """K blocks the kernel's (rank, warp) slice accumulates, in its order (chunk, u)."""
    s = rank * p.warps + warp
    out = []
    for c in range(-(-p.kb // unroll)):
        for u in range(unroll):
            j = c * unroll + u
            if j < p.kb and s * p.kb + j < p.kbt:
                out.append(s * p.kb + j)
    return out


def owner_rank(p: Plan, idx: int) -> int:
    """Cluster rank that reduces and stores accumulator slot `idx` (0 .. FRAG-1)."""
    return idx % p.ck


def out_pos(idx: int, ln: int) -> tuple[int, int]:
    """Accumulator slot idx = m_tile * 4 + c of lane ln -> (row in CTA tile, token in 8-tile)."""
    mt, c = idx // 4, idx % 4
    return mt * 16 + ln // 4 + (c // 2) * 8, (ln % 4) * 2 + c % 2


@dsl_user_op
def load_peer(smem_ptr, rank, *, loc=None, ip=None) -> Float32:
    """fp32 at the same shared-memory offset in cluster CTA `rank` (PTX mapa + ld.shared::cluster;
    side effects + memory clobber keep it after the cluster barrier)."""
    addr = llvm.ptrtoint(T.i32(), smem_ptr.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip)
    return Float32(llvm.inline_asm(
        T.f32(), [addr, Int32(rank).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, $1, $2;\n\tld.shared::cluster.f32 $0, [ra];\n\t}",
        "=f,r,r,~{memory}", has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


class SkinnyGemm:
    def __init__(self, p: Plan, n_tiles: int, unroll: int, ring: bool = False):
        self.p = p
        self.n_tiles = n_tiles             # 8-token MMA tiles per token chunk
        self.unroll = unroll
        self.ring = ring and p.kb * p.ck * p.warps == p.kbt     # exact plans only: no slice skips a block

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, stream: cuda.CUstream):
        if const_expr(self.p.ck > 1):
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, self.p.ck, 1], block=[32 * self.p.warps, 1, 1],
                                           cluster=[1, self.p.ck, 1], stream=stream, use_pdl=PDL)
        else:
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, 1, 1], block=[32 * self.p.warps, 1, 1],
                                           stream=stream, use_pdl=PDL)

    @cute.jit
    def sync_all(self):
        """Every thread's shared-memory partials visible to the whole cluster (or CTA)."""
        if const_expr(self.p.ck > 1):
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
        else:
            cute.arch.barrier()

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor):
        p = self.p
        NT = self.n_tiles
        U = self.unroll
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, rank, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_launch_dependents()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        r0 = bn * ROWS
        s = rank * p.warps + warp
        blk0 = s * p.kb
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        # WLOAD: weight vectors load through this atom, carrying the knob's cache hints
        wld = cute.make_copy_atom(cute.nvgpu.CopyG2ROp(), BFloat16, num_bits_per_copy=16 * VEC,
                                  l2_prefetch_size=cute.nvgpu.L2PrefetchSize.SIZE_128B,
                             l1c_evict_priority=cute.nvgpu.CacheEvictionPriority.NO_ALLOCATE)
        # weight rows of this lane: m-tile mt, half h -> r0 + mt*16 + h*8 + g (clamped to N-1)
        wrow = [[cutlass.min(r0 + mt * 16 + h * 8 + g, p.n - 1) for h in range(2)] for mt in range(M_TILES)]
        rw = [[[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
                for _ in range(2)] for _ in range(M_TILES)] for _ in range(U)]
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(NT)]
               for _ in range(M_TILES)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        rxu = [cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(U)]
        rxl = [[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(U)]
               for _ in range(NT)]
        smem = cutlass.memory.SmemAllocator()
        sPart = smem.allocate_tensor(Float32, cute.make_layout((p.warps, FRAG, 32), stride=(FRAG * 32, 32, 1)),
                                     byte_alignment=16)
        for ch in cutlass.range(cute.ceil_div(M, 8 * NT), unroll=1):
            tok0 = ch * (8 * NT)
            for mt in cutlass.range_constexpr(M_TILES):
                for nt in cutlass.range_constexpr(NT):
                    acc[mt][nt].fill(0.0)
            if const_expr(self.ring):
                # RING (small kernel, exact plans): the slice's KB blocks unrolled at compile time over
                # a ring of U register slots; block j's MMAs, then block j + U's loads into its slot,
                # so U blocks stay in flight for the whole slice instead of draining every chunk
                rxs = [[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(NT)]
                       for _ in range(U)]
                for j in cutlass.range_constexpr(min(U, p.kb)):
                    kv = (blk0 + j) * 4 + t
                    for mt in cutlass.range_constexpr(M_TILES):
                        for h in cutlass.range_constexpr(2):
                            cute.copy(wld, cute.local_tile(mW[wrow[mt][h], None], (VEC,), (kv,)), rw[j][mt][h])
                if const_expr(PDL):
                    if ch == 0:
                        cute.arch.griddepcontrol_wait()                  # x comes from the previous kernel
                for j in cutlass.range_constexpr(min(U, p.kb)):
                    kv = (blk0 + j) * 4 + t
                    for nt in cutlass.range_constexpr(NT):
                        tok = cutlass.min(tok0 + nt * 8 + g, M - 1)      # tokens past B: dropped at the store
                        cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv,)), rxs[j][nt])
                for j in cutlass.range_constexpr(p.kb):
                    sl = j % U
                    for nt in cutlass.range_constexpr(NT):
                        for ks in cutlass.range_constexpr(2):
                            for q in cutlass.range_constexpr(4):
                                b[q] = rxs[sl][nt][4 * ks + q]
                            for mt in cutlass.range_constexpr(M_TILES):
                                a[0] = rw[sl][mt][0][4 * ks]
                                a[1] = rw[sl][mt][0][4 * ks + 1]
                                a[2] = rw[sl][mt][1][4 * ks]
                                a[3] = rw[sl][mt][1][4 * ks + 1]
                                a[4] = rw[sl][mt][0][4 * ks + 2]
                                a[5] = rw[sl][mt][0][4 * ks + 3]
                                a[6] = rw[sl][mt][1][4 * ks + 2]
                                a[7] = rw[sl][mt][1][4 * ks + 3]
                                cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
                    if const_expr(j + U < p.kb):
                        kv = (blk0 + j + U) * 4 + t
                        for mt in cutlass.range_constexpr(M_TILES):
                            for h in cutlass.range_constexpr(2):
                                cute.copy(wld, cute.local_tile(mW[wrow[mt][h], None], (VEC,), (kv,)), rw[sl][mt][h])
                        for nt in cutlass.range_constexpr(NT):
                            tok = cutlass.min(tok0 + nt * 8 + g, M - 1)
                            cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv,)), rxs[sl][nt])
            else:
                for c in cutlass.range(-(-p.kb // U), unroll=1):
                    # every weight load of the chunk in flight before any math
                    for u in cutlass.range_constexpr(U):
                        j = c * U + u
                        if (j < p.kb) & (blk0 + j < p.kbt):                  # warp-uniform
                            kv = (blk0 + j) * 4 + t                          # 16-byte vector index along K
                            for mt in cutlass.range_constexpr(M_TILES):
                                for h in cutlass.range_constexpr(2):
                                    cute.copy(wld, cute.local_tile(mW[wrow[mt][h], None], (VEC,), (kv,)), rw[u][mt][h])
                    if const_expr(PDL):
                        if (ch == 0) & (c == 0):
                            cute.arch.griddepcontrol_wait()                  # x comes from the previous kernel
                    if const_expr(NT == 1):
                        # XPRE (one token tile): the chunk's x vectors load right behind its weights, so their
                        # L2 round trip overlaps the HBM one instead of following it
                        tok = cutlass.min(tok0 + g, M - 1)
                        for u in cutlass.range_constexpr(U):
                            j = c * U + u
                            if (j < p.kb) & (blk0 + j < p.kbt):
                                kv = (blk0 + j) * 4 + t
                                cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv,)), rxu[u])
                        nt = 0
                        for u in cutlass.range_constexpr(U):
                            j = c * U + u
                            if (j < p.kb) & (blk0 + j < p.kbt):
                                for ks in cutlass.range_constexpr(2):
                                    for q in cutlass.range_constexpr(4):
                                        b[q] = rxu[u][4 * ks + q]
                                    for mt in cutlass.range_constexpr(M_TILES):
                                        a[0] = rw[u][mt][0][4 * ks]
                                        a[1] = rw[u][mt][0][4 * ks + 1]
                                        a[2] = rw[u][mt][1][4 * ks]
                                        a[3] = rw[u][mt][1][4 * ks + 1]
                                        a[4] = rw[u][mt][0][4 * ks + 2]
                                        a[5] = rw[u][mt][0][4 * ks + 3]
                                        a[6] = rw[u][mt][1][4 * ks + 2]
                                        a[7] = rw[u][mt][1][4 * ks + 3]
                                        cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
                    else:
                        if const_expr(NT > 1):
                            # XLARGE: every x vector of the chunk (NT token tiles x U blocks) in flight before any MMA
                            for nt in cutlass.range_constexpr(NT):
                                if tok0 + nt * 8 < M:                            # warp-uniform: tiles past B load nothing
                                    tok = cutlass.min(tok0 + nt * 8 + g, M - 1)  # tokens past B: dropped at the store
                                    for u in cutlass.range_constexpr(U):
                                        j = c * U + u
                                        if (j < p.kb) & (blk0 + j < p.kbt):
                                            kv = (blk0 + j) * 4 + t
                                            cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv,)), rxl[nt][u])
                            for nt in cutlass.range_constexpr(NT):
                                if tok0 + nt * 8 < M:                            # warp-uniform
                                    for u in cutlass.range_constexpr(U):
                                        j = c * U + u
                                        if (j < p.kb) & (blk0 + j < p.kbt):
                                            for ks in cutlass.range_constexpr(2):
                                                for q in cutlass.range_constexpr(4):
                                                    b[q] = rxl[nt][u][4 * ks + q]
                                                for mt in cutlass.range_constexpr(M_TILES):
                                                    a[0] = rw[u][mt][0][4 * ks]
                                                    a[1] = rw[u][mt][0][4 * ks + 1]
                                                    a[2] = rw[u][mt][1][4 * ks]
                                                    a[3] = rw[u][mt][1][4 * ks + 1]
                                                    a[4] = rw[u][mt][0][4 * ks + 2]
                                                    a[5] = rw[u][mt][0][4 * ks + 3]
                                                    a[6] = rw[u][mt][1][4 * ks + 2]
                                                    a[7] = rw[u][mt][1][4 * ks + 3]
                                                    cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
                        else:
                            for nt in cutlass.range_constexpr(NT):
                                if tok0 + nt * 8 < M:                                # warp-uniform
                                    tok = cutlass.min(tok0 + nt * 8 + g, M - 1)
                                    for u in cutlass.range_constexpr(U):
                                        j = c * U + u
                                        if (j < p.kb) & (blk0 + j < p.kbt):
                                            kv = (blk0 + j) * 4 + t
                                            cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv,)), rx)
                                            for ks in cutlass.range_constexpr(2):
                                                for q in cutlass.range_constexpr(4):
                                                    b[q] = rx[4 * ks + q]
                                                for mt in cutlass.range_constexpr(M_TILES):
                                                    # PTX A order: (g, 2t..2t+1), (g+8, ..), (g, 2t+8..), (g+8, ..)
                                                    a[0] = rw[u][mt][0][4 * ks]
                                                    a[1] = rw[u][mt][0][4 * ks + 1]
                                                    a[2] = rw[u][mt][1][4 * ks]
                                                    a[3] = rw[u][mt][1][4 * ks + 1]
                                                    a[4] = rw[u][mt][0][4 * ks + 2]
                                                    a[5] = rw[u][mt][0][4 * ks + 3]
                                                    a[6] = rw[u][mt][1][4 * ks + 2]
                                                    a[7] = rw[u][mt][1][4 * ks + 3]
                                                    cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
            # deterministic reduction over (rank, warp) through (distributed) shared memory
            for nt in cutlass.range_constexpr(NT):
                if tok0 + nt * 8 < M:                                    # cluster-uniform
                    for idx in cutlass.range_constexpr(FRAG):
                        sPart[warp, idx, lane] = acc[idx // 4][nt][idx % 4]
                    self.sync_all()
                    for r in cutlass.range_constexpr((FRAG * 32 + 32 * p.warps - 1) // (32 * p.warps)):
                        pos = r * 32 * p.warps + tidx
                        idx = pos // 32
                        ln = pos % 32
                        dr, dt = out_pos(idx, ln)
                        row = r0 + dr
                        tk = tok0 + nt * 8 + dt
                        if (pos < FRAG * 32) & (owner_rank(p, idx) == rank) & (row < p.n) & (tk < M):
                            tot = Float32(0.0)
                            for q in cutlass.range_constexpr(p.ck):
                                for w in cutlass.range_constexpr(p.warps):
                                    if const_expr(p.ck > 1):
                                        # rank q's partial: ld.shared::cluster of its mapped address
                                        tot = tot + load_peer(sPart.iterator + (w * FRAG * 32 + pos), q)
                                    else:
                                        tot = tot + sPart[w, idx, ln]
                            mO[tk, row] = tot.to(BFloat16)
                    self.sync_all()                                      # partials read before reuse / exit


class SkinnyGemmLarge(SkinnyGemm):
    """The B <= 64 instance under its own name (its own PTX file and ptxas report)."""



PIPE_WARPS = 4                # warps per CTA; they split the CTA's weight rows (N), not K
PIPE_MT = 1                  # 16-row MMA tiles per warp
PIPE_STAGES = 8              # shared-memory ring slots; PIPE_STAGES - 1 stages load while one computes
PIPE_SB = 2                 # 32-wide K blocks per stage
PIPE_CTAS_TARGET = 396           # CTAs resident at once (132 SMs x CTAs an SM): the grid stays within it
PIPE_MAX_CLUSTER = 1        # CTAs of a cluster splitting K (a DSMEM reduction)
PIPE_MINCTAS = 2             # CTAs an SM the registers must allow (ptxas launch bound nvvm.minctasm)
PIPE_FROM = 32                # B <= this runs SkinnyGemmPipeMid (SmallMidLarge), larger B this one
PIPE_ROWS = 16 * PIPE_MT * PIPE_WARPS      # weight rows per CTA
PIPE_THREADS = 32 * PIPE_WARPS + 32                # + the producer warp (lp_tma)
PIPE_NT = LARGE_M // 8                     # 8-token MMA tiles: every token of B <= 64 at once
PIPE_FRAG = PIPE_MT * 4                    # fp32 accumulators per lane per token tile
PIPE_TCLASSES = (8,)               # token-tile counts the main loop is built for (B <= 8 x count)
PIPE_MID_THREADS = 32 * PIPE_WARPS          # lp_midpipe: SkinnyGemmPipeMid (B <= PIPE_FROM) has no producer warp
PIPE_MID_TCLASSES = (4, 2,)          # its main loop's token-tile counts
assert PIPE_WARPS in (2, 4, 8) and PIPE_STAGES >= 2 and PIPE_SB >= 1 and PIPE_NT == 8


class PipePlan(NamedTuple):
    """Compile-time partition of one (K, N) for the pipelined B <= 64 kernel."""
    k: int
    n: int
    n_blocks: int          # CTAs along N (PIPE_ROWS rows each, the last one ragged)
    ck: int                # CTAs of a cluster along K
    kbt: int               # 32-wide K blocks in total
    kb: int                # K blocks per rank (the last rank's range may be short or empty)
    nst: int               # ring stages per rank: ceil(kb / PIPE_SB)


def pipe_plan(k: int, n: int) -> PipePlan:
    assert k % 32 == 0 and n % 8 == 0, (k, n)
    n_blocks = -(-n // PIPE_ROWS)
    kbt = k // 32
    ck = 1
    # the largest cluster (any size up to PIPE_MAX_CLUSTER) whose grid is one wave, every rank keeping two
    # stages: a grid past the resident CTAs runs a second, mostly empty wave (session 58's first study
    # doubled CK to 224 CTAs of one per SM, 1.7 waves, and ran 1.4-2x a copy at B=16)
    while ck < PIPE_MAX_CLUSTER and n_blocks * (ck + 1) <= PIPE_CTAS_TARGET and 2 * (ck + 1) * PIPE_SB <= kbt:
        ck += 1
    kb = -(-kbt // ck)
    return PipePlan(k=k, n=n, n_blocks=n_blocks, ck=ck, kbt=kbt, kb=kb, nst=-(-kb // PIPE_SB))


def pipe_rank_blocks(p: PipePlan, rank: int) -> list[int]:
    """K blocks that cluster rank `rank` accumulates, in the kernel's order (stage, block of the stage)."""
    out = []
    for st in range(p.nst):
        for j in range(PIPE_SB):
            if st * PIPE_SB + j < p.kb and rank * p.kb + st * PIPE_SB + j < p.kbt:
                out.append(rank * p.kb + st * PIPE_SB + j)
    return out


PIPE_W_ELEMS = PIPE_STAGES * PIPE_SB * PIPE_ROWS * 32      # bf16 of the ring's weight slots
PIPE_RING_BYTES = PIPE_STAGES * PIPE_SB * (PIPE_ROWS + LARGE_M) * 32 * 2
PIPE_PART_BYTES = PIPE_WARPS * PIPE_NT * PIPE_FRAG * 32 * 4     # fp32 partials of the split-K reduction


def pipe_smem_bytes(p: PipePlan) -> int:
    """Shared memory of one CTA: the ring (weights and x of every slot); with a cluster the partials
    reuse its bytes once the last stage's MMAs are done."""
    return max(PIPE_RING_BYTES, PIPE_PART_BYTES if p.ck > 1 else 0)


def pipe_out_pos(warp: int, idx: int, ln: int) -> tuple[int, int]:
    """Accumulator slot idx = m_tile * 4 + c of lane ln in warp `warp` -> (row in the CTA tile, token in
    its 8-token tile)."""
    mt, c = idx // 4, idx % 4
    return warp * 16 * PIPE_MT + mt * 16 + ln // 4 + (c // 2) * 8, (ln % 4) * 2 + c % 2




class SkinnyGemmPipe:
    """The B <= 64 kernel with `lpipe` (SkinnyGemmLarge's replacement; the small kernel is untouched).

    A tile GEMM: a CTA owns PIPE_ROWS weight rows x all B tokens, its WARPS warps split the rows
    (PIPE_MT 16-row MMA tiles each) and share one copy of x in shared memory, so x is read from L2
    N / PIPE_ROWS times instead of N / ROWS (16 rows a CTA, warps splitting K: at B=64 that is 4x the
    weight bytes). K streams through a ring of PIPE_STAGES shared-memory slots of PIPE_SB blocks,
    filled by cp.async (16 bytes a thread, L2 only): PIPE_STAGES - 1 stages are in flight while the
    warps run one stage's MMAs, with one CTA barrier a stage. A cluster of CK CTAs (the largest whose
    grid is one wave of PIPE_CTAS_TARGET) splits K; the owner rank of each accumulator slot sums the CK
    partials in rank order through DSMEM, the partials in the ring's bytes. MMA fragments
    (mma.sync m16n8k16, A = weights, B = x) are the swap-AB kernels' 16-byte vectors, read from shared
    memory laid out [slot, block, row, 32]: a quarter-warp reads 128 contiguous bytes (no bank
    conflict).
    """

    def __init__(self, p: PipePlan):
        self.p = p

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, stream: cuda.CUstream):
        # LP_TMA: tensor maps for one block of the ring a copy: PIPE_ROWS weight rows or LARGE_M tokens x 32
        # (boxes past N or B are zero-filled)
        w_atom, tWm = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mW,
                                                  cute.make_layout((PIPE_ROWS, 32), stride=(32, 1)), (PIPE_ROWS, 32))
        x_atom, tXm = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mX,
                                                  cute.make_layout((LARGE_M, 32), stride=(32, 1)), (LARGE_M, 32))
        if const_expr(self.p.ck > 1):
            self.kernel(mX, mW, mO, w_atom, tWm, x_atom, tXm).launch(grid=[self.p.n_blocks, self.p.ck, 1], block=[PIPE_THREADS, 1, 1],
                                           cluster=[1, self.p.ck, 1], stream=stream, use_pdl=PDL,
                                           min_blocks_per_mp=PIPE_MINCTAS, preferred_smem_carveout=100)
        else:
            self.kernel(mX, mW, mO, w_atom, tWm, x_atom, tXm).launch(grid=[self.p.n_blocks, 1, 1], block=[PIPE_THREADS, 1, 1],
                                           stream=stream, use_pdl=PDL,
                                           min_blocks_per_mp=PIPE_MINCTAS, preferred_smem_carveout=100)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, w_atom: cute.CopyAtom, tWm: cute.Tensor,
               x_atom: cute.CopyAtom, tXm: cute.Tensor):
        p = self.p
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, rank, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_launch_dependents()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        r0 = bn * PIPE_ROWS
        kb0 = rank * p.kb                                    # this rank's first K block
        wr0 = warp * 16 * PIPE_MT                            # this warp's first row in the CTA tile
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        smem = cutlass.memory.SmemAllocator()
        buf = smem.allocate(pipe_smem_bytes(p), byte_alignment=128)   # the ring, later the partials
        sW = cute.make_tensor(cute.recast_ptr(buf, dtype=BFloat16),
                              cute.make_layout((PIPE_STAGES, PIPE_SB, PIPE_ROWS, 32),
                                               stride=(PIPE_SB * PIPE_ROWS * 32, PIPE_ROWS * 32, 32, 1)))
        sX = cute.make_tensor(cute.recast_ptr(buf, dtype=BFloat16) + PIPE_W_ELEMS,
                              cute.make_layout((PIPE_STAGES, PIPE_SB, LARGE_M, 32),
                                               stride=(PIPE_SB * LARGE_M * 32, LARGE_M * 32, 32, 1)))
        rw = [[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(2)]
              for _ in range(PIPE_MT)]
        rxs = [cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(PIPE_NT)]
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(PIPE_NT)]
               for _ in range(PIPE_MT)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        for mt in cutlass.range_constexpr(PIPE_MT):
            for nt in cutlass.range_constexpr(PIPE_NT):
                acc[mt][nt].fill(0.0)
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()                  # x comes from the previous kernel
        # LP_TMA: full[s] completes when slot s's TMA bytes land, empty[s] when every consumer warp is done with it
        full = smem.allocate_tensor(cutlass.Int64, cute.make_layout((PIPE_STAGES,)), byte_alignment=8)
        empty = smem.allocate_tensor(cutlass.Int64, cute.make_layout((PIPE_STAGES,)), byte_alignment=8)
        if tidx == 0:
            for s0 in cutlass.range_constexpr(PIPE_STAGES):
                cute.arch.mbarrier_init(full.iterator + s0, 1)
                cute.arch.mbarrier_init(empty.iterator + s0, PIPE_WARPS)
            cute.arch.mbarrier_init_fence()
        cute.arch.barrier()
        if warp == PIPE_WARPS:
            # the producer warp: stage st into slot st % S once the consumers released its previous use
            # (one TMA copy a block of W and one of x; a stage past the rank's range completes with no bytes)
            for st in cutlass.range(p.nst, unroll=1):
                slot = st % PIPE_STAGES
                if st >= PIPE_STAGES:
                    cute.arch.mbarrier_wait(empty.iterator + slot, (st // PIPE_STAGES - 1) % 2)
                nblk = cutlass.max(cutlass.min(cutlass.min(p.kb, p.kbt - kb0) - st * PIPE_SB, PIPE_SB), 0)
                if lane == 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(full.iterator + slot, nblk * (PIPE_ROWS + LARGE_M) * 64)
                for j in cutlass.range_constexpr(PIPE_SB):
                    if j < nblk:
                        kblk = kb0 + st * PIPE_SB + j
                        # the whole warp calls each copy: it elects one lane itself
                        gW = cute.local_tile(tWm, (PIPE_ROWS, 32), (bn, kblk))
                        tS, tG = cpasync.tma_partition(w_atom, 0, cute.make_layout(1),
                                                       cute.group_modes(sW[slot, j, None, None], 0, 2),
                                                       cute.group_modes(gW, 0, 2))
                        cute.copy(w_atom, tG, tS, tma_bar_ptr=full.iterator + slot)
                        gX = cute.local_tile(tXm, (LARGE_M, 32), (0, kblk))
                        tS, tG = cpasync.tma_partition(x_atom, 0, cute.make_layout(1),
                                                       cute.group_modes(sX[slot, j, None, None], 0, 2),
                                                       cute.group_modes(gX, 0, 2))
                        cute.copy(x_atom, tG, tS, tma_bar_ptr=full.iterator + slot)
        else:
            for st in cutlass.range(p.nst, unroll=1):
                slot = st % PIPE_STAGES
                cute.arch.mbarrier_wait(full.iterator + slot, (st // PIPE_STAGES) % 2)   # stage st's TMA bytes have landed
                for j in cutlass.range_constexpr(PIPE_SB):
                    if (st * PIPE_SB + j < p.kb) & (kb0 + st * PIPE_SB + j < p.kbt):     # CTA-uniform
                        for mt in cutlass.range_constexpr(PIPE_MT):
                            for h in cutlass.range_constexpr(2):
                                cute.autovec_copy(cute.local_tile(sW[slot, j, wr0 + mt * 16 + h * 8 + g, None], (VEC,), (t,)),
                                                  rw[mt][h])
                        # 8 token tiles, no guard: 4 tiles' x vectors at a time, then their MMAs k-step by k-step
                        # (one basic block; a tile's two k-steps are 4 MMAs apart)
                        for n0 in cutlass.range_constexpr(0, 8, 4):
                            for nt in cutlass.range_constexpr(n0, n0 + 4):
                                cute.autovec_copy(cute.local_tile(sX[slot, j, nt * 8 + g, None], (VEC,), (t,)), rxs[nt])
                            for ks in cutlass.range_constexpr(2):
                                for nt in cutlass.range_constexpr(n0, n0 + 4):
                                    for q in cutlass.range_constexpr(4):
                                        b[q] = rxs[nt][4 * ks + q]
                                    for mt in cutlass.range_constexpr(PIPE_MT):
                                        a[0] = rw[mt][0][4 * ks]
                                        a[1] = rw[mt][0][4 * ks + 1]
                                        a[2] = rw[mt][1][4 * ks]
                                        a[3] = rw[mt][1][4 * ks + 1]
                                        a[4] = rw[mt][0][4 * ks + 2]
                                        a[5] = rw[mt][0][4 * ks + 3]
                                        a[6] = rw[mt][1][4 * ks + 2]
                                        a[7] = rw[mt][1][4 * ks + 3]
                                        cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
                cute.arch.sync_warp()
                if lane == 0:
                    cute.arch.mbarrier_arrive(empty.iterator + slot)   # this warp is done reading the slot
        if const_expr(p.ck == 1):
            # each accumulator belongs to one warp: write it out
            for nt in cutlass.range_constexpr(PIPE_NT):
                if (nt * 8 < M) & (warp < PIPE_WARPS):
                    for idx in cutlass.range_constexpr(PIPE_FRAG):
                        dr, dt = pipe_out_pos(warp, idx, lane)
                        row = r0 + dr
                        tk = nt * 8 + dt
                        if (row < p.n) & (tk < M):
                            mO[tk, row] = acc[idx // 4][nt][idx % 4].to(BFloat16)
        else:
            # deterministic split-K reduction: slot (nt, idx) of every (warp, lane) is summed over the ranks in
            # rank order by its owner rank (nt * PIPE_FRAG + idx) % CK, each thread the slots it wrote itself
            sPart = cute.make_tensor(cute.recast_ptr(buf, dtype=Float32),
                                     cute.make_layout((PIPE_WARPS, PIPE_NT, PIPE_FRAG, 32),
                                                      stride=(PIPE_NT * PIPE_FRAG * 32, PIPE_FRAG * 32, 32, 1)))
            cute.arch.barrier()                              # every warp's last MMAs have read the ring
            if warp < PIPE_WARPS:                            # the producer warp holds no sums
                for nt in cutlass.range_constexpr(PIPE_NT):
                    for idx in cutlass.range_constexpr(PIPE_FRAG):
                        sPart[warp, nt, idx, lane] = acc[idx // 4][nt][idx % 4]
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            for nt in cutlass.range_constexpr(PIPE_NT):
                if nt * 8 < M:                               # cluster-uniform
                    for idx in cutlass.range_constexpr(PIPE_FRAG):
                        if ((nt * PIPE_FRAG + idx) % p.ck == rank) & (warp < PIPE_WARPS):
                            dr, dt = pipe_out_pos(warp, idx, lane)
                            row = r0 + dr
                            tk = nt * 8 + dt
                            if (row < p.n) & (tk < M):
                                tot = Float32(0.0)
                                for q in cutlass.range_constexpr(p.ck):
                                    tot = tot + load_peer(sPart.iterator + ((warp * PIPE_NT + nt) * PIPE_FRAG * 32
                                                                            + idx * 32 + lane), q)
                                mO[tk, row] = tot.to(BFloat16)
            cute.arch.cluster_arrive()                       # partials read before any CTA exits
            cute.arch.cluster_wait()


def _compile_pipe(p: PipePlan, options: str):
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, p.k), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (p.n, p.k), stride_order=(1, 0), assumed_align=16)
    o = fake(BFloat16, (m, p.n), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(SkinnyGemmPipe(p), x, w, o, stream, options=options)


class SkinnyGemmPipeMid:
    """lp_midpipe: SkinnyGemmPipe's twin for B = SMALL_M + 1 .. PIPE_FROM, its ring always filled by
    cp.async (never lp_tma), its main loop built for 4 and 2 token tiles; SkinnyGemmPipe runs the larger B.

    The B <= 64 kernel with `lpipe` (SkinnyGemmLarge's replacement; the small kernel is untouched).

    A tile GEMM: a CTA owns PIPE_ROWS weight rows x all B tokens, its WARPS warps split the rows
    (PIPE_MT 16-row MMA tiles each) and share one copy of x in shared memory, so x is read from L2
    N / PIPE_ROWS times instead of N / ROWS (16 rows a CTA, warps splitting K: at B=64 that is 4x the
    weight bytes). K streams through a ring of PIPE_STAGES shared-memory slots of PIPE_SB blocks,
    filled by cp.async (16 bytes a thread, L2 only): PIPE_STAGES - 1 stages are in flight while the
    warps run one stage's MMAs, with one CTA barrier a stage. A cluster of CK CTAs (the largest whose
    grid is one wave of PIPE_CTAS_TARGET) splits K; the owner rank of each accumulator slot sums the CK
    partials in rank order through DSMEM, the partials in the ring's bytes. MMA fragments
    (mma.sync m16n8k16, A = weights, B = x) are the swap-AB kernels' 16-byte vectors, read from shared
    memory laid out [slot, block, row, 32]: a quarter-warp reads 128 contiguous bytes (no bank
    conflict).
    """

    def __init__(self, p: PipePlan):
        self.p = p

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, stream: cuda.CUstream):
        if const_expr(self.p.ck > 1):
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, self.p.ck, 1], block=[PIPE_MID_THREADS, 1, 1],
                                           cluster=[1, self.p.ck, 1], stream=stream, use_pdl=PDL,
                                           min_blocks_per_mp=PIPE_MINCTAS, preferred_smem_carveout=100)
        else:
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, 1, 1], block=[PIPE_MID_THREADS, 1, 1],
                                           stream=stream, use_pdl=PDL,
                                           min_blocks_per_mp=PIPE_MINCTAS, preferred_smem_carveout=100)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor):
        p = self.p
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, rank, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_launch_dependents()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        r0 = bn * PIPE_ROWS
        kb0 = rank * p.kb                                    # this rank's first K block
        wr0 = warp * 16 * PIPE_MT                            # this warp's first row in the CTA tile
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        g2s = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL), BFloat16,
                                  num_bits_per_copy=16 * VEC)
        smem = cutlass.memory.SmemAllocator()
        buf = smem.allocate(pipe_smem_bytes(p), byte_alignment=128)   # the ring, later the partials
        sW = cute.make_tensor(cute.recast_ptr(buf, dtype=BFloat16),
                              cute.make_layout((PIPE_STAGES, PIPE_SB, PIPE_ROWS, 32),
                                               stride=(PIPE_SB * PIPE_ROWS * 32, PIPE_ROWS * 32, 32, 1)))
        sX = cute.make_tensor(cute.recast_ptr(buf, dtype=BFloat16) + PIPE_W_ELEMS,
                              cute.make_layout((PIPE_STAGES, PIPE_SB, LARGE_M, 32),
                                               stride=(PIPE_SB * LARGE_M * 32, LARGE_M * 32, 32, 1)))
        rw = [[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(2)]
              for _ in range(PIPE_MT)]
        rxs = [cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(PIPE_NT)]
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(PIPE_NT)]
               for _ in range(PIPE_MT)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        for mt in cutlass.range_constexpr(PIPE_MT):
            for nt in cutlass.range_constexpr(PIPE_NT):
                acc[mt][nt].fill(0.0)
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()                  # x comes from the previous kernel
        # prologue: stages 0 .. PIPE_STAGES - 2 in flight, one commit group each (empty past the rank's range)
        for s0 in cutlass.range_constexpr(PIPE_STAGES - 1):
            if const_expr(s0 < p.nst):
                # stage s0 into ring slot s0: the CTA's PIPE_ROWS weight rows and x's tokens, PIPE_SB blocks each,
                # 16 bytes a cp.async; 4 * PIPE_SB consecutive threads copy one row's contiguous 64 * PIPE_SB bytes
                for i in cutlass.range_constexpr(PIPE_ROWS * 4 * PIPE_SB // PIPE_MID_THREADS):
                    q = i * PIPE_MID_THREADS + tidx
                    row = q // (4 * PIPE_SB)
                    j = (q // 4) % PIPE_SB
                    kb_ = s0 * PIPE_SB + j
                    if (kb_ < p.kb) & (kb0 + kb_ < p.kbt):
                        cute.copy(g2s, cute.local_tile(mW[cutlass.min(r0 + row, p.n - 1), None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                  cute.local_tile(sW[s0, j, row, None], (VEC,), (q % 4,)))
                for i in cutlass.range_constexpr(LARGE_M * 4 * PIPE_SB // PIPE_MID_THREADS):
                    q = i * PIPE_MID_THREADS + tidx
                    tok = q // (4 * PIPE_SB)
                    j = (q // 4) % PIPE_SB
                    kb_ = s0 * PIPE_SB + j
                    if (tok < M) & (kb_ < p.kb) & (kb0 + kb_ < p.kbt):          # tokens past B: never read back
                        cute.copy(g2s, cute.local_tile(mX[tok, None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                  cute.local_tile(sX[s0, j, tok, None], (VEC,), (q % 4,)))
            cute.arch.cp_async_commit_group()
        if M > 16:                                     # 4 token tiles (B 17..32)
            for st in cutlass.range(p.nst, unroll=1):
                cute.arch.cp_async_wait_group(PIPE_STAGES - 2)   # this thread's copies of stage st have landed
                cute.arch.barrier()                              # everyone's have, and slot (st - 1) % S is consumed
                nxt = st + PIPE_STAGES - 1
                if nxt < p.nst:
                    # stage nxt into ring slot nxt % PIPE_STAGES: the CTA's PIPE_ROWS weight rows and x's tokens, PIPE_SB blocks each,
                    # 16 bytes a cp.async; 4 * PIPE_SB consecutive threads copy one row's contiguous 64 * PIPE_SB bytes
                    for i in cutlass.range_constexpr(PIPE_ROWS * 4 * PIPE_SB // PIPE_MID_THREADS):
                        q = i * PIPE_MID_THREADS + tidx
                        row = q // (4 * PIPE_SB)
                        j = (q // 4) % PIPE_SB
                        kb_ = nxt * PIPE_SB + j
                        if (kb_ < p.kb) & (kb0 + kb_ < p.kbt):
                            cute.copy(g2s, cute.local_tile(mW[cutlass.min(r0 + row, p.n - 1), None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                      cute.local_tile(sW[nxt % PIPE_STAGES, j, row, None], (VEC,), (q % 4,)))
                    for i in cutlass.range_constexpr(LARGE_M * 4 * PIPE_SB // PIPE_MID_THREADS):
                        q = i * PIPE_MID_THREADS + tidx
                        tok = q // (4 * PIPE_SB)
                        j = (q // 4) % PIPE_SB
                        kb_ = nxt * PIPE_SB + j
                        if (tok < M) & (kb_ < p.kb) & (kb0 + kb_ < p.kbt):          # tokens past B: never read back
                            cute.copy(g2s, cute.local_tile(mX[tok, None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                      cute.local_tile(sX[nxt % PIPE_STAGES, j, tok, None], (VEC,), (q % 4,)))
                cute.arch.cp_async_commit_group()
                slot = st % PIPE_STAGES
                for j in cutlass.range_constexpr(PIPE_SB):
                    if (st * PIPE_SB + j < p.kb) & (kb0 + st * PIPE_SB + j < p.kbt):     # CTA-uniform
                        for mt in cutlass.range_constexpr(PIPE_MT):
                            for h in cutlass.range_constexpr(2):
                                cute.autovec_copy(cute.local_tile(sW[slot, j, wr0 + mt * 16 + h * 8 + g, None], (VEC,), (t,)),
                                                  rw[mt][h])
                        # 4 token tiles, no guard: every x vector first, then the MMAs k-step by k-step
                        # (one basic block; a tile's two k-steps are 4 MMAs apart)
                        for nt in cutlass.range_constexpr(4):
                            cute.autovec_copy(cute.local_tile(sX[slot, j, nt * 8 + g, None], (VEC,), (t,)), rxs[nt])
                        for ks in cutlass.range_constexpr(2):
                            for nt in cutlass.range_constexpr(4):
                                for q in cutlass.range_constexpr(4):
                                    b[q] = rxs[nt][4 * ks + q]
                                for mt in cutlass.range_constexpr(PIPE_MT):
                                    a[0] = rw[mt][0][4 * ks]
                                    a[1] = rw[mt][0][4 * ks + 1]
                                    a[2] = rw[mt][1][4 * ks]
                                    a[3] = rw[mt][1][4 * ks + 1]
                                    a[4] = rw[mt][0][4 * ks + 2]
                                    a[5] = rw[mt][0][4 * ks + 3]
                                    a[6] = rw[mt][1][4 * ks + 2]
                                    a[7] = rw[mt][1][4 * ks + 3]
                                    cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
        else:                                                # 2 token tiles
            for st in cutlass.range(p.nst, unroll=1):
                cute.arch.cp_async_wait_group(PIPE_STAGES - 2)   # this thread's copies of stage st have landed
                cute.arch.barrier()                              # everyone's have, and slot (st - 1) % S is consumed
                nxt = st + PIPE_STAGES - 1
                if nxt < p.nst:
                    # stage nxt into ring slot nxt % PIPE_STAGES: the CTA's PIPE_ROWS weight rows and x's tokens, PIPE_SB blocks each,
                    # 16 bytes a cp.async; 4 * PIPE_SB consecutive threads copy one row's contiguous 64 * PIPE_SB bytes
                    for i in cutlass.range_constexpr(PIPE_ROWS * 4 * PIPE_SB // PIPE_MID_THREADS):
                        q = i * PIPE_MID_THREADS + tidx
                        row = q // (4 * PIPE_SB)
                        j = (q // 4) % PIPE_SB
                        kb_ = nxt * PIPE_SB + j
                        if (kb_ < p.kb) & (kb0 + kb_ < p.kbt):
                            cute.copy(g2s, cute.local_tile(mW[cutlass.min(r0 + row, p.n - 1), None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                      cute.local_tile(sW[nxt % PIPE_STAGES, j, row, None], (VEC,), (q % 4,)))
                    for i in cutlass.range_constexpr(LARGE_M * 4 * PIPE_SB // PIPE_MID_THREADS):
                        q = i * PIPE_MID_THREADS + tidx
                        tok = q // (4 * PIPE_SB)
                        j = (q // 4) % PIPE_SB
                        kb_ = nxt * PIPE_SB + j
                        if (tok < M) & (kb_ < p.kb) & (kb0 + kb_ < p.kbt):          # tokens past B: never read back
                            cute.copy(g2s, cute.local_tile(mX[tok, None], (VEC,), ((kb0 + kb_) * 4 + q % 4,)),
                                      cute.local_tile(sX[nxt % PIPE_STAGES, j, tok, None], (VEC,), (q % 4,)))
                cute.arch.cp_async_commit_group()
                slot = st % PIPE_STAGES
                for j in cutlass.range_constexpr(PIPE_SB):
                    if (st * PIPE_SB + j < p.kb) & (kb0 + st * PIPE_SB + j < p.kbt):     # CTA-uniform
                        for mt in cutlass.range_constexpr(PIPE_MT):
                            for h in cutlass.range_constexpr(2):
                                cute.autovec_copy(cute.local_tile(sW[slot, j, wr0 + mt * 16 + h * 8 + g, None], (VEC,), (t,)),
                                                  rw[mt][h])
                        # 2 token tiles, no guard: every x vector first, then the MMAs k-step by k-step
                        # (one basic block; a tile's two k-steps are 2 MMAs apart)
                        for nt in cutlass.range_constexpr(2):
                            cute.autovec_copy(cute.local_tile(sX[slot, j, nt * 8 + g, None], (VEC,), (t,)), rxs[nt])
                        for ks in cutlass.range_constexpr(2):
                            for nt in cutlass.range_constexpr(2):
                                for q in cutlass.range_constexpr(4):
                                    b[q] = rxs[nt][4 * ks + q]
                                for mt in cutlass.range_constexpr(PIPE_MT):
                                    a[0] = rw[mt][0][4 * ks]
                                    a[1] = rw[mt][0][4 * ks + 1]
                                    a[2] = rw[mt][1][4 * ks]
                                    a[3] = rw[mt][1][4 * ks + 1]
                                    a[4] = rw[mt][0][4 * ks + 2]
                                    a[5] = rw[mt][0][4 * ks + 3]
                                    a[6] = rw[mt][1][4 * ks + 2]
                                    a[7] = rw[mt][1][4 * ks + 3]
                                    cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
        cute.arch.cp_async_wait_group(0)
        if const_expr(p.ck == 1):
            # each accumulator belongs to one warp: write it out
            for nt in cutlass.range_constexpr(PIPE_NT):
                if nt * 8 < M:
                    for idx in cutlass.range_constexpr(PIPE_FRAG):
                        dr, dt = pipe_out_pos(warp, idx, lane)
                        row = r0 + dr
                        tk = nt * 8 + dt
                        if (row < p.n) & (tk < M):
                            mO[tk, row] = acc[idx // 4][nt][idx % 4].to(BFloat16)
        else:
            # deterministic split-K reduction: slot (nt, idx) of every (warp, lane) is summed over the ranks in
            # rank order by its owner rank (nt * PIPE_FRAG + idx) % CK, each thread the slots it wrote itself
            sPart = cute.make_tensor(cute.recast_ptr(buf, dtype=Float32),
                                     cute.make_layout((PIPE_WARPS, PIPE_NT, PIPE_FRAG, 32),
                                                      stride=(PIPE_NT * PIPE_FRAG * 32, PIPE_FRAG * 32, 32, 1)))
            cute.arch.barrier()                              # every warp's last MMAs have read the ring
            for nt in cutlass.range_constexpr(PIPE_NT):
                for idx in cutlass.range_constexpr(PIPE_FRAG):
                    sPart[warp, nt, idx, lane] = acc[idx // 4][nt][idx % 4]
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            for nt in cutlass.range_constexpr(PIPE_NT):
                if nt * 8 < M:                               # cluster-uniform
                    for idx in cutlass.range_constexpr(PIPE_FRAG):
                        if (nt * PIPE_FRAG + idx) % p.ck == rank:
                            dr, dt = pipe_out_pos(warp, idx, lane)
                            row = r0 + dr
                            tk = nt * 8 + dt
                            if (row < p.n) & (tk < M):
                                tot = Float32(0.0)
                                for q in cutlass.range_constexpr(p.ck):
                                    tot = tot + load_peer(sPart.iterator + ((warp * PIPE_NT + nt) * PIPE_FRAG * 32
                                                                            + idx * 32 + lane), q)
                                mO[tk, row] = tot.to(BFloat16)
            cute.arch.cluster_arrive()                       # partials read before any CTA exits
            cute.arch.cluster_wait()


def _compile_pipe_mid(p: PipePlan, options: str):
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, p.k), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (p.n, p.k), stride_order=(1, 0), assumed_align=16)
    o = fake(BFloat16, (m, p.n), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(SkinnyGemmPipeMid(p), x, w, o, stream, options=options)



def _compile_one(cls, p: Plan, n_tiles: int, unroll: int, options: str, ring: bool = False):
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, p.k), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (p.n, p.k), stride_order=(1, 0), assumed_align=16)
    o = fake(BFloat16, (m, p.n), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(cls(p, n_tiles, unroll, ring), x, w, o, stream, options=options)


class SmallLarge:
    """The two compiled kernels; calling it runs the one for this batch (x.shape[0], a host int)."""
    def __init__(self, small, large):
        self.small, self.large = small, large

    def __call__(self, x, weight, out) -> None:
        (self.small if x.shape[0] <= SMALL_M else self.large)(x, weight, out)


class SmallMidLarge(SmallLarge):
    """lpipe with lp_from: three compiled kernels. B <= SMALL_M the small kernel, B <= PIPE_FROM the
    pipe's twin (SkinnyGemmPipeMid, lp_midpipe), larger B SkinnyGemmPipe."""
    def __init__(self, small, mid, large):
        super().__init__(small, large)
        self.mid = mid

    def __call__(self, x, weight, out) -> None:
        m = x.shape[0]
        (self.small if m <= SMALL_M else self.mid if m <= PIPE_FROM else self.large)(x, weight, out)


def compile(tp: int, options: str, shape: str = "", **static):
    """K and N are compile-time (the named shape at this TP); batch is symbolic."""
    k, n = gemm_kn(shape, tp)
    p = plan(k, n)
    ps = plan(k, n, alt=uses_alt(shape or DEFAULT_SHAPE, tp))
    return SmallMidLarge(_compile_one(SkinnyGemm, ps, SMALL_M // 8, ps.unroll, options, ring=ps.ring),
                      _compile_pipe_mid(pipe_plan(k, n), options),
                      _compile_pipe(pipe_plan(k, n), options))


def launch(compiled, x, weight, out) -> None:
    compiled(x, weight, out)
