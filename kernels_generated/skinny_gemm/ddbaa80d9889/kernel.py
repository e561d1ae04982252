"""skinny_gemm candidate: swap-AB tensor-core GEMM, x staged in shared memory, warps split N.

Rendered from prompts/kernels/skinny_gemm/swapab_xs.py.j2 with
    warps=4 m_tiles=1 unroll=8 unroll_large=4
    ctas_target=264 max_cluster=8 small_m=8 balance=True

Math (reference_impls/skinny_gemm.py): out[B, N] = x[B, K] @ W[N, K]^T, fp32 accumulate, bf16 out.
Swap-AB mma.sync.m16n8k16 (bf16 in, fp32 acc): 16 weight rows on the MMA M axis, 8 tokens on N.
Partition (plan() below, compile-time per shape): a CTA owns ROWS = 16 * M_TILES * WARPS weight
rows, warp w the 16 * M_TILES rows r0 + w * 16 * M_TILES ..; all warps of a CTA walk the same K
range, so the x chunk [TOKS tokens, 32 * U columns] is read from L2 once per CTA into shared
memory (16-byte loads and stores) and feeds every warp: L2 traffic for x is B / ROWS of the
weight traffic (the swapab family re-reads x per 16 rows). Each A (weight) fragment feeds one
MMA per active 8-token tile. Grid (ceil(N / ROWS), CK): the CK CTAs of a cluster split K into
contiguous slices of KB = ceil(KBT / CK) 32-wide blocks (KBT = K / 32), streamed in chunks of U
blocks whose weight loads all issue before the chunk's barrier and MMAs. Lane (g = lane / 4,
t = lane % 4) loads 16 contiguous bytes at k = 8t .. 8t+7 of a block for W rows g, g+8 (per
m-tile) and reads x token g of the tile at the same k from shared memory; elements 4s .. 4s+3
feed MMA k-step s (A and B use the same permuted k). Rows past N read row N-1, tokens past B
read token B-1 (results dropped); a warp whose rows all lie past N skips its loads and MMAs.
Reduction (deterministic, CK > 1): each rank writes its fp32 accumulators to shared memory in
rounds of TPR token tiles; after a cluster barrier the owner rank of each 32-lane slot
(slot % CK) sums the CK partials in rank order through DSMEM and writes bf16. With CK = 1
each lane stores its accumulators directly. Two kernels: B <= SMALL_M (UNROLL) and B <= 64
(UNROLL_LARGE); launch() picks one by x.shape[0]; larger B loops over 64-token chunks.
"""
from __future__ import annotations

from typing import NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

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
WARPS = 4                       # warps of a CTA, each owning 16 * M_TILES rows
M_TILES = 1
UNROLL = 8                     # 32-col K blocks per chunk, small-B kernel
UNROLL_LARGE = 4         # the same for the B <= 64 kernel
CTAS_TARGET = 264           # smallest CK whose grid reaches this (or the best balance)
MAX_CLUSTER = 8           # 8 = the portable cluster size limit
SMALL_M = 8
BALANCE = True                   # pick CK for whole waves over the SMs
LARGE_M = 64
NUM_SMS = 132                             # H200
PAD = 32                                  # bf16 pad per x row in smem: rows g, g+1 of a quarter-warp hit disjoint banks
PART_BYTES = 16384                        # shared-memory budget of one reduction round

THREADS = 32 * WARPS
WROWS = 16 * M_TILES                      # rows of one warp
ROWS = WROWS * WARPS                      # rows of one CTA
FRAG = M_TILES * 4                        # fp32 accumulators per lane per 8-token tile


class Plan(NamedTuple):
    """Compile-time partition of one (K, N)."""
    k: int
    n: int
    n_blocks: int          # CTAs along N (ROWS each, the last one ragged)
    ck: int                # CTAs of a cluster along K
    kbt: int               # 32-wide K blocks in total
    kb: int                # K blocks per rank (the last rank's slice may be short)


def _cks(kbt: int) -> list[int]:
    """Cluster sizes up to MAX_CLUSTER where every rank gets at least one K block."""
    out, c = [], 1
    while c <= MAX_CLUSTER:
        kb = -(-kbt // c)
        if (c - 1) * kb < kbt:
            out.append(c)
        c *= 2
    return out


def plan(k: int, n: int) -> Plan:
    assert k % 32 == 0 and n % 8 == 0, (k, n)
    n_blocks = -(-n // ROWS)
    kbt = k // 32
    cks = _cks(kbt)
    ok = [c for c in cks if n_blocks * c >= CTAS_TARGET] or [cks[-1]]
    if BALANCE:
        # whole waves: a grid of C CTAs loads its busiest SM with ceil(C / SMs) of them
        ck = min(ok, key=lambda c: (-(-n_blocks * c // NUM_SMS)) * NUM_SMS / (n_blocks * c))
    else:
        ck = ok[0]
    return Plan(k=k, n=n, n_blocks=n_blocks, ck=ck, kbt=kbt, kb=-(-kbt // ck))


def rank_blocks(p: Plan, rank: int, unroll: int) -> list[int]:
    """K blocks rank `rank` accumulates, in its order (chunk, u)."""
    out = []
    for c in range(-(-p.kb // unroll)):
        for u in range(unroll):
            j = c * unroll + u
            if j < p.kb and rank * p.kb + j < p.kbt:
                out.append(rank * p.kb + j)
    return out


def out_pos(idx: int, ln: int) -> tuple[int, int]:
    """Accumulator slot idx = m_tile * 4 + c of lane ln -> (row in warp tile, token in 8-tile)."""
    mt, c = idx // 4, idx % 4
    return mt * 16 + ln // 4 + (c // 2) * 8, (ln % 4) * 2 + c % 2


def tiles_per_round(n_tiles: int) -> int:
    """8-token tiles whose partials fit one reduction round's shared memory."""
    return max(1, min(n_tiles, PART_BYTES // (WARPS * FRAG * 32 * 4)))


def n_slots(n_tiles: int) -> int:
    """32-lane partial slots (warp', tile in round, idx) of one reduction round."""
    return WARPS * tiles_per_round(n_tiles) * FRAG


def slot_iters(p: Plan, n_tiles: int) -> int:
    return -(-n_slots(n_tiles) // (p.ck * WARPS))


def slot_of(i, warp, rank, ck: int):
    """Slot that (rank, warp) reduces at step i: slots are dealt round-robin over ranks, then warps."""
    return (i * WARPS + warp) * ck + rank


def slot_pos(sl, ln, tpr: int):
    """Slot sl, lane ln -> (warp', tile in round, row in warp tile, token in 8-tile)."""
    idx = sl % FRAG
    dr, dt = out_pos(idx, ln)
    return sl // (tpr * FRAG), (sl // FRAG) % tpr, dr, dt


def owned_slots(p: Plan, n_tiles: int, rank: int, warp: int) -> list[int]:
    """Reduction slots of one round that (rank, warp) sums and stores (the kernel's loop)."""
    return [sl for i in range(slot_iters(p, n_tiles)) if (sl := slot_of(i, warp, rank, p.ck)) < n_slots(n_tiles)]


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


class SkinnyGemmXs:
    def __init__(self, p: Plan, n_tiles: int, unroll: int):
        self.p = p
        self.n_tiles = n_tiles             # 8-token MMA tiles per token chunk
        self.unroll = unroll

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, stream: cuda.CUstream):
        if const_expr(self.p.ck > 1):
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, self.p.ck, 1], block=[THREADS, 1, 1],
                                           cluster=[1, self.p.ck, 1], stream=stream)
        else:
            self.kernel(mX, mW, mO).launch(grid=[self.p.n_blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.jit
    def sync_cluster(self):
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor):
        p = self.p
        NT = self.n_tiles
        U = self.unroll
        TOKS = 8 * NT
        KC = 32 * U                          # K columns of one chunk
        XV = TOKS * KC // VEC                # 16-byte x vectors of one chunk
        XR = -(-XV // THREADS)               # ... per thread
        TPR = tiles_per_round(NT)
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, rank, _ = cute.arch.block_idx()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        r0 = bn * ROWS
        rw0 = r0 + warp * WROWS              # first row of this warp
        wact = rw0 < p.n                     # warp-uniform: some row of the warp is real
        blk0 = rank * p.kb
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        wrow = [[cutlass.min(rw0 + mt * 16 + h * 8 + g, p.n - 1) for h in range(2)] for mt in range(M_TILES)]
        rw = [[[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
                for _ in range(2)] for _ in range(M_TILES)] for _ in range(U)]
        rxs = [cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(XR)]
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(NT)]
               for _ in range(M_TILES)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        smem = cutlass.memory.SmemAllocator()
        sX = smem.allocate_tensor(BFloat16, cute.make_layout((TOKS, KC + PAD), stride=(KC + PAD, 1)),
                                  byte_alignment=16)
        sPart = smem.allocate_tensor(Float32, cute.make_layout((WARPS * TPR * FRAG, 32), stride=(32, 1)),
                                     byte_alignment=16)
        for ch in cutlass.range(cute.ceil_div(M, TOKS), unroll=1):
            tok0 = ch * TOKS
            mpad = cutlass.min(M - tok0, TOKS)        # tokens of this chunk
            mtok = (mpad + 7) // 8 * 8                # x rows staged: whole 8-token tiles
            for mt in cutlass.range_constexpr(M_TILES):
                for nt in cutlass.range_constexpr(NT):
                    acc[mt][nt].fill(0.0)
            for c in cutlass.range(-(-p.kb // U), unroll=1):
                kcol0 = (blk0 + c * U) * 32           # first K column of the chunk
                if wact:
                    for u in cutlass.range_constexpr(U):
                        j = c * U + u
                        if (j < p.kb) & (blk0 + j < p.kbt):                  # CTA-uniform
                            kv = (blk0 + j) * 4 + t                          # 16-byte vector index along K
                            for mt in cutlass.range_constexpr(M_TILES):
                                for h in cutlass.range_constexpr(2):
                                    cute.autovec_copy(cute.local_tile(mW[wrow[mt][h], None], (VEC,), (kv,)),
                                                      rw[u][mt][h])
                # x chunk -> registers (vector v: token v // (KC / 8), 16-byte column v % (KC / 8))
                for i in cutlass.range_constexpr(XR):
                    v = i * THREADS + tidx
                    tl = v // (KC // VEC)
                    cv = v % (KC // VEC)
                    j = c * U + cv // 4
                    if (v < XV) & (tl < mtok) & (j < p.kb) & (blk0 + j < p.kbt):
                        tok = cutlass.min(tok0 + tl, M - 1)
                        cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kcol0 // VEC + cv,)), rxs[i])
                cute.arch.barrier()                                          # previous chunk's x read
                for i in cutlass.range_constexpr(XR):
                    v = i * THREADS + tidx
                    tl = v // (KC // VEC)
                    cv = v % (KC // VEC)
                    j = c * U + cv // 4
                    if (v < XV) & (tl < mtok) & (j < p.kb) & (blk0 + j < p.kbt):
                        cute.autovec_copy(rxs[i], cute.local_tile(sX[tl, None], (VEC,), (cv,)))
                cute.arch.barrier()                                          # x chunk visible
                if wact:
                    for nt in cutlass.range_constexpr(NT):
                        if nt * 8 < mpad:                                    # CTA-uniform
                            for u in cutlass.range_constexpr(U):
                                j = c * U + u
                                if (j < p.kb) & (blk0 + j < p.kbt):
                                    cute.autovec_copy(cute.local_tile(sX[nt * 8 + g, None], (VEC,), (u * 4 + t,)),
                                                      rx)
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
            if const_expr(p.ck == 1):
                for nt in cutlass.range_constexpr(NT):
                    if nt * 8 < mpad:
                        for idx in cutlass.range_constexpr(FRAG):
                            dr, dt = out_pos(idx, lane)
                            row = rw0 + dr
                            tk = tok0 + nt * 8 + dt
                            if (row < p.n) & (tk < M):
                                mO[tk, row] = acc[idx // 4][nt][idx % 4].to(BFloat16)
            else:
                # deterministic split-K reduction through DSMEM, TPR token tiles per round
                for rd in cutlass.range_constexpr(-(-NT // TPR)):
                    if rd * TPR * 8 < mpad:                                  # cluster-uniform
                        for ntl in cutlass.range_constexpr(TPR):
                            if const_expr(rd * TPR + ntl < NT):
                                for idx in cutlass.range_constexpr(FRAG):
                                    sPart[(warp * TPR + ntl) * FRAG + idx, lane] = acc[idx // 4][rd * TPR + ntl][idx % 4]
                        self.sync_cluster()
                        for i in cutlass.range_constexpr(slot_iters(p, NT)):
                            sl = slot_of(i, warp, rank, p.ck)
                            wl, ntl, dr, dt = slot_pos(sl, lane, TPR)
                            row = r0 + wl * WROWS + dr
                            tk = tok0 + (rd * TPR + ntl) * 8 + dt
                            if (sl < n_slots(NT)) & (rd * TPR + ntl < NT) & (row < p.n) & (tk < M):
                                tot = Float32(0.0)
                                for q in cutlass.range_constexpr(p.ck):
                                    tot = tot + load_peer(sPart.iterator + (sl * 32 + lane), q)
                                mO[tk, row] = tot.to(BFloat16)
                        self.sync_cluster()                                  # partials read before reuse / exit


class SkinnyGemmXsLarge(SkinnyGemmXs):
    """The B <= 64 instance under its own name (its own PTX file and ptxas report)."""


def _compile_one(cls, p: Plan, n_tiles: int, unroll: int, options: str):
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, p.k), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (p.n, p.k), stride_order=(1, 0), assumed_align=16)
    o = fake(BFloat16, (m, p.n), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(cls(p, n_tiles, unroll), x, w, o, stream, options=options)


class SmallLarge:
    """The two compiled kernels; calling it runs the one for this batch (x.shape[0], a host int)."""
    def __init__(self, small, large):
        self.small, self.large = small, large

    def __call__(self, x, weight, out) -> None:
        (self.small if x.shape[0] <= SMALL_M else self.large)(x, weight, out)


def compile(tp: int, options: str, shape: str = "", **static):
    """K and N are compile-time (the named shape at this TP); batch is symbolic."""
    k, n = gemm_kn(shape, tp)
    p = plan(k, n)
    return SmallLarge(_compile_one(SkinnyGemmXs, p, SMALL_M // 8, UNROLL, options),
                      _compile_one(SkinnyGemmXsLarge, p, LARGE_M // 8, UNROLL_LARGE, options))


def launch(compiled, x, weight, out) -> None:
    compiled(x, weight, out)
