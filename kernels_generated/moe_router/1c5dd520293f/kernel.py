"""moe_router candidate: tensor-core (mma.sync bf16, swap-AB) router GEMM + CTA-per-token top-16.

Rendered from prompts/kernels/moe_router/mma_hybrid.py.j2 with
    m_tiles=2 n_tiles=1 warps=4 cta_splits=8 k_accs=1 pdl=True

Math (reference_impls/moe_router.py):
    logits = x @ W^T (fp32 accumulate), s = sigmoid(logits), ids = top16(s + bias),
    w = s[ids] / sum(s[ids]) * 1.0
GEMM (same as the mma_topk family): mma.sync.m16n8k16 swap-AB, 16 expert rows of W on M and
8 tokens on N, weights in registers and read from HBM once for all B, grid
(E / (16 * M_TILES), CTA_SPLITS), CTA warps split K and are summed in warp order through shared
memory; fp32 partial logits [CTA_SPLITS, 64, E].
Top-k: one CTA of 224 threads (7 warps) per token. Thread t owns experts 4t .. 4t+3: one
16-byte load per split (summed in split order: deterministic) and one of the bias, so the
whole row is loaded in one round trip. Keys s + bias become order-preserving int32.
Phase 1: warp w holds experts 128w .. 128w+127 and finds its local top-16, in order, by a bitonic
network (BITONIC_STEPS): its 16-position blocks sorted, then three levels that keep the better of
two 16-blocks (one sorted each way: a bitonic sequence holding their top 16) and sort it again.
Position p = 4 * lane + slot: a step at a distance of 4 positions or more pairs lane ^ (distance /
4) (a shuffle of key and id per slot), a shorter one two slots of the lane. 12 shuffle steps and
13 in-lane ones, no redux, no shared-memory write per round; lanes 0-3 then write (key, id) to
shared slots 16w .. 16w + 15, and each thread's 4 scores s go to shared memory by expert.
The global top-16 is a
subset of the union of the 7 local top-16 lists (an expert beaten by 16 of its own warp is
beaten by 16 overall).
Phase 2: each of the 112 candidates counts the candidates that beat it ((key, -id) order, a
strict total order): each warp's list is sorted, so per list by a binary search (5 probes); that rank (0..111) is its sorted position, ranks < 16 are the output.
Ties therefore go to the lower expert id. Warp 0 sums the 16 scores with a butterfly.
Two kernels from one @cute.jit, programmatic dependent launch (the top-k grid loads
the bias, then waits on griddepcontrol). The workspace lives in a per-device cache:
calls must not run concurrently on two streams of one device.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import BFloat16, Float32, Int32, const_expr

H, E, TOP_K = 7168, 896, 16
B_MAX = 64
ROUTED_SCALING_FACTOR = 1.0
VEC = 8                                   # bf16 per 16-byte load
M_TILES = 2                   # 16-row MMA tiles per warp
N_TILES = 1                   # 8-token MMA tiles (B <= 8 * N_TILES)
WARPS = 4
CTA_SPLITS = 8
K_ACCS = 1                      # independent accumulator sets along K (MMA latency)
PDL = True
TOPK_BALLOT = True                        # phase-1 winner by ballot (lowest lane), not by redux min of ids
TOPK_MERGE = True                         # lanes pre-sorted; phase 2 by binary searches
SORT4 = ((0, 1), (2, 3), (0, 2), (1, 3), (1, 2))   # compare-exchange network sorting 4 slots
SEARCH_STEPS = (8, 4, 2, 1)               # then one last probe: a count 0..16 in a list of 16

ROWS_CTA = 16 * M_TILES
N_BLOCKS = E // ROWS_CTA
K_W = H // (CTA_SPLITS * WARPS)           # K columns per warp
KB = K_W // 32                            # 32-wide K blocks per warp (two MMA k-steps each)
FRAG = M_TILES * N_TILES * 4              # fp32 accumulators per lane
EPT = 4                                   # experts per top-k thread: one 16-byte fp32 vector
TOPK_THREADS = E // EPT                   # 224 = 7 warps
TOPK_WARPS = TOPK_THREADS // 32
NCAND = TOPK_WARPS * TOP_K                # 112 phase-1 candidates
INT_MIN = -2147483647 - 1                 # below every finite key's ordered int (a retired slot)
WARP_POS = 32 * EPT                        # positions a warp sorts (phase 1)
# phase 1's compare-exchanges, (direction bit, distance): positions p and p ^ distance, the better
# one going first where p & bit == 0 (bit 0: everywhere). TOP_K-blocks sorted (each way in turn),
# then per level the better of two such blocks kept (a bitonic TOP_K-block) and sorted again.
BITONIC_STEPS = (tuple((1 << s, 1 << t) for s in range(1, TOP_K.bit_length()) for t in range(s - 1, -1, -1))
                 + tuple(x for lv in range(TOP_K.bit_length() - 1, WARP_POS.bit_length() - 1)
                         for x in ((0, 1 << lv),) + tuple((2 << lv, 1 << t) for t in range(TOP_K.bit_length() - 2, -1, -1))))
assert TOP_K & (TOP_K - 1) == 0 and WARP_POS & (WARP_POS - 1) == 0 and TOP_K % EPT == 0
assert E % ROWS_CTA == 0 and H % (CTA_SPLITS * WARPS * 32) == 0
assert (FRAG * 32) % (32 * WARPS) == 0
assert TOPK_THREADS % 32 == 0 and 32 * EPT >= TOP_K and NCAND <= TOPK_THREADS

# the large-batch path (B > B_SWITCH): mma_rowsplit's GEMM (gemm_rs_kernel), constants prefixed RS_
B_SWITCH = 16
RS_M_TILES = 1
RS_N_TILES = 1
RS_WARPS = 4
RS_CTA_SPLITS = 16
RS_TOK_GROUP = 32
RS_K_ACCS = 4
RS_ROWS_WARP = 16 * RS_M_TILES
RS_ROWS_CTA = RS_ROWS_WARP * RS_WARPS
RS_N_BLOCKS = E // RS_ROWS_CTA
RS_K_C = H // RS_CTA_SPLITS
RS_KB = RS_K_C // 32
RS_X_STRIDE = RS_K_C + (64 - RS_K_C * 2 % 128) % 128 // 2
assert E % RS_ROWS_CTA == 0 and H % (RS_CTA_SPLITS * 32) == 0 and RS_TOK_GROUP % 8 == 0
assert RS_TOK_GROUP * RS_X_STRIDE * 2 <= 48 * 1024 and (RS_X_STRIDE * 2) % 128 == 64


def expert_of(tidx, v):
    """Expert id in register slot v (0..3) of top-k thread tidx (warp w: experts 128w ..)."""
    return tidx * EPT + v


def ordered_key(bits):
    """fp32 bits -> int32 with the same order (negatives: magnitude bits flipped)."""
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def cand_slot(warp, rnd):
    """Shared-memory slot of the candidate warp `warp` picks in round `rnd`."""
    return warp * TOP_K + rnd


def lane_argmax(cand):
    """Trace-time tree argmax over [(key, slot)] in ascending slot order: the left operand
    always holds the lower slots (= lower expert ids), so a tie keeps the left."""
    while len(cand) > 1:
        nxt = []
        for p in range(0, len(cand) - 1, 2):
            (ka, ja), (kb, jb) = cand[p], cand[p + 1]
            take_b = kb > ka
            nxt.append((cutlass.select_(take_b, kb, ka), cutlass.select_(take_b, jb, ja)))
        if len(cand) % 2:
            nxt.append(cand[-1])
        cand = nxt
    return cand[0]


def beats(ka, ia, kb, ib):
    """(key a, id a) comes before (key b, id b) in the output: larger key, then lower id."""
    return (ka > kb) | ((ka == kb) & (ia < ib))


def frag_pos(idx):
    """Accumulator index -> (m-tile, n-tile, c register) in the layout used below."""
    return idx // (N_TILES * 4), (idx // 4) % N_TILES, idx % 4


class MoERouter:
    def __init__(self, large: bool):
        self.large = large                                       # B > B_SWITCH: the row-split GEMM
        self.splits = RS_CTA_SPLITS if large else CTA_SPLITS    # partial logits the top-k sums

    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mWs: cute.Tensor,
                 mTW: cute.Tensor, mIds: cute.Tensor, stream: cuda.CUstream):
        M = mX.shape[0]
        if const_expr(self.large):
            self.gemm_rs_kernel(mX, mW, mWs).launch(
                grid=[RS_N_BLOCKS, RS_CTA_SPLITS, 1], block=[32 * RS_WARPS, 1, 1], stream=stream)
        else:
            self.gemm_kernel(mX, mW, mWs).launch(
                grid=[N_BLOCKS, CTA_SPLITS, 1], block=[32 * WARPS, 1, 1], stream=stream)
        self.topk_kernel(mWs, mBias, mTW, mIds).launch(
            grid=[M, 1, 1], block=[TOPK_THREADS, 1, 1], stream=stream, use_pdl=PDL)

    # ------------------------------------------------------------------ GEMM (partials)
    @cute.kernel
    def gemm_kernel(self, mX: cute.Tensor, mW: cute.Tensor, mWs: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, split, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_launch_dependents()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        e0 = bn * ROWS_CTA
        kv0 = (split * WARPS + warp) * (K_W // VEC) + t     # 16-byte vector index along K
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        # every weight vector of this warp in flight before any math: [KB][M_TILES][row g, g+8]
        rw = [[[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
                for _ in range(2)] for _ in range(M_TILES)] for _ in range(KB)]
        for kb in cutlass.range_constexpr(KB):
            for mt in cutlass.range_constexpr(M_TILES):
                for h in cutlass.range_constexpr(2):
                    cute.autovec_copy(cute.local_tile(mW[e0 + mt * 16 + h * 8 + g, None], (VEC,), (kv0 + kb * 4,)),
                                      rw[kb][mt][h])
        # K_ACCS accumulator sets: MMA k-step i adds into set i % K_ACCS (summed in set order), so
        # the dependent MMA chain per chunk is 2 * KB / K_ACCS long
        acc = [[[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(N_TILES)]
                for _ in range(M_TILES)] for _ in range(K_ACCS)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        smem = cutlass.memory.SmemAllocator()
        sRed = smem.allocate_tensor(Float32, cute.make_layout((WARPS, FRAG, 32), stride=(FRAG * 32, 32, 1)),
                                    byte_alignment=16)
        # token chunks of 8 * N_TILES reuse the weight registers: any B is served by one pass over W
        for ch in cutlass.range(cute.ceil_div(M, 8 * N_TILES), unroll=1):
            tok0 = ch * (8 * N_TILES)
            for ka in cutlass.range_constexpr(K_ACCS):
                for mt in cutlass.range_constexpr(M_TILES):
                    for nt in cutlass.range_constexpr(N_TILES):
                        acc[ka][mt][nt].fill(0.0)
            for nt in cutlass.range_constexpr(N_TILES):
                if tok0 + nt * 8 < M:                           # warp-uniform
                    tok = tok0 + nt * 8 + g
                    tok = cutlass.select_(tok < M, tok, M - 1)  # rows past B: valid memory, unused columns
                    for kb in cutlass.range_constexpr(KB):
                        cute.autovec_copy(cute.local_tile(mX[tok, None], (VEC,), (kv0 + kb * 4,)), rx)
                        for s in cutlass.range_constexpr(2):
                            for j in cutlass.range_constexpr(4):
                                b[j] = rx[4 * s + j]
                            for mt in cutlass.range_constexpr(M_TILES):
                                # PTX A fragment order: (g, k 2t..2t+1), (g+8, ..), (g, k 2t+8..), (g+8, ..)
                                a[0] = rw[kb][mt][0][4 * s]
                                a[1] = rw[kb][mt][0][4 * s + 1]
                                a[2] = rw[kb][mt][1][4 * s]
                                a[3] = rw[kb][mt][1][4 * s + 1]
                                a[4] = rw[kb][mt][0][4 * s + 2]
                                a[5] = rw[kb][mt][0][4 * s + 3]
                                a[6] = rw[kb][mt][1][4 * s + 2]
                                a[7] = rw[kb][mt][1][4 * s + 3]
                                ka = (2 * kb + s) % K_ACCS
                                cute.gemm(atom, acc[ka][mt][nt], a, b, acc[ka][mt][nt])
            # CTA reduction over warps in fixed order through shared memory (deterministic)
            cute.arch.barrier()                                 # the previous chunk's readers are done
            for idx in cutlass.range_constexpr(FRAG):
                mt, nt, c = frag_pos(idx)
                part = acc[0][mt][nt][c]
                for ka in cutlass.range_constexpr(1, K_ACCS):
                    part = part + acc[ka][mt][nt][c]
                sRed[warp, idx, lane] = part
            cute.arch.barrier()
            for r in cutlass.range_constexpr(FRAG // WARPS):
                p = r * 32 * WARPS + tidx
                idx = p // 32
                ln = p % 32
                nt = (idx // 4) % N_TILES
                c = idx % 4
                tok = tok0 + nt * 8 + (ln % 4) * 2 + c % 2
                if tok < M:
                    tot = sRed[0, idx, ln]
                    for w in cutlass.range_constexpr(1, WARPS):
                        tot = tot + sRed[w, idx, ln]
                    ex = e0 + (idx // (N_TILES * 4)) * 16 + ln // 4 + (c // 2) * 8
                    mWs[split, tok, ex] = tot


    # ------------------------------------------------------------------ GEMM (partials)
    @cute.kernel
    def gemm_rs_kernel(self, mX: cute.Tensor, mW: cute.Tensor, mWs: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        bn, split, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_launch_dependents()
        M = mX.shape[0]
        g = lane // 4
        t = lane % 4
        e0 = bn * RS_ROWS_CTA + warp * RS_ROWS_WARP      # this warp's first expert row
        kv0 = split * (RS_K_C // VEC)                  # first 16-byte vector of the CTA's K slice
        atom = cute.make_mma_atom(cute.nvgpu.warp.MmaF16BF16Op(BFloat16, Float32, (16, 8, 16)))
        # every weight vector of this warp in flight before anything else: [RS_KB][RS_M_TILES][row g, g+8]
        rw = [[[cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
                for _ in range(2)] for _ in range(RS_M_TILES)] for _ in range(RS_KB)]
        for kb in cutlass.range_constexpr(RS_KB):
            for mt in cutlass.range_constexpr(RS_M_TILES):
                for h in cutlass.range_constexpr(2):
                    cute.autovec_copy(cute.local_tile(mW[e0 + mt * 16 + h * 8 + g, None], (VEC,), (kv0 + kb * 4 + t,)),
                                      rw[kb][mt][h])
        # RS_K_ACCS independent accumulator sets (MMA k-step i adds into set i % RS_K_ACCS, summed in set
        # order at the end): the dependent MMA chain per chunk is 2 * RS_KB / RS_K_ACCS long, not 2 * RS_KB
        acc = [[[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(RS_N_TILES)]
                for _ in range(RS_M_TILES)] for _ in range(RS_K_ACCS)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = [cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16) for _ in range(RS_KB)]
        smem = cutlass.memory.SmemAllocator()
        sX = smem.allocate_tensor(BFloat16, cute.make_layout((RS_TOK_GROUP, RS_X_STRIDE), stride=(RS_X_STRIDE, 1)),
                                  byte_alignment=16)
        g2s = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), BFloat16, num_bits_per_copy=128)
        vpr = RS_K_C // VEC                            # 16-byte vectors per staged row
        for grp in cutlass.range(cute.ceil_div(M, RS_TOK_GROUP), unroll=1):
            g0 = grp * RS_TOK_GROUP
            rows = cutlass.select_(M - g0 < RS_TOK_GROUP, M - g0, RS_TOK_GROUP)
            n_vec = cute.ceil_div(rows, 8) * 8 * vpr    # whole 8-token MMA tiles (rows past B: token B-1)
            cute.arch.barrier()                         # the previous group's readers are done
            for it in cutlass.range(cute.ceil_div(n_vec, 32 * RS_WARPS), unroll=1):
                i = it * (32 * RS_WARPS) + tidx
                if i < n_vec:
                    r = i // vpr
                    tok = cutlass.select_(g0 + r < M, g0 + r, M - 1)
                    cute.copy(g2s, cute.local_tile(mX[tok, None], (VEC,), (kv0 + i % vpr,)),
                              cute.local_tile(sX[r, None], (VEC,), (i % vpr,)))
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(0)
            cute.arch.barrier()
            for ch in cutlass.range(cute.ceil_div(rows, 8 * RS_N_TILES), unroll=1):
                r0 = ch * (8 * RS_N_TILES)
                for ka in cutlass.range_constexpr(RS_K_ACCS):
                    for mt in cutlass.range_constexpr(RS_M_TILES):
                        for nt in cutlass.range_constexpr(RS_N_TILES):
                            acc[ka][mt][nt].fill(0.0)
                for nt in cutlass.range_constexpr(RS_N_TILES):
                    if r0 + nt * 8 < rows:                  # warp-uniform
                        for kb in cutlass.range_constexpr(RS_KB):
                            cute.autovec_copy(cute.local_tile(sX[r0 + nt * 8 + g, None], (VEC,), (kb * 4 + t,)), rx[kb])
                        for kb in cutlass.range_constexpr(RS_KB):
                            for s in cutlass.range_constexpr(2):
                                for j in cutlass.range_constexpr(4):
                                    b[j] = rx[kb][4 * s + j]
                                for mt in cutlass.range_constexpr(RS_M_TILES):
                                    # PTX A fragment order: (g, k 2t..2t+1), (g+8, ..), (g, k 2t+8..), (g+8, ..)
                                    a[0] = rw[kb][mt][0][4 * s]
                                    a[1] = rw[kb][mt][0][4 * s + 1]
                                    a[2] = rw[kb][mt][1][4 * s]
                                    a[3] = rw[kb][mt][1][4 * s + 1]
                                    a[4] = rw[kb][mt][0][4 * s + 2]
                                    a[5] = rw[kb][mt][0][4 * s + 3]
                                    a[6] = rw[kb][mt][1][4 * s + 2]
                                    a[7] = rw[kb][mt][1][4 * s + 3]
                                    ka = (2 * kb + s) % RS_K_ACCS
                                    cute.gemm(atom, acc[ka][mt][nt], a, b, acc[ka][mt][nt])
                # C fragment: c0 (row g, token 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
                for mt in cutlass.range_constexpr(RS_M_TILES):
                    for nt in cutlass.range_constexpr(RS_N_TILES):
                        for c in cutlass.range_constexpr(4):
                            tok = g0 + r0 + nt * 8 + 2 * t + c % 2
                            if tok < M:
                                tot = acc[0][mt][nt][c]
                                for ka in cutlass.range_constexpr(1, RS_K_ACCS):
                                    tot = tot + acc[ka][mt][nt][c]
                                mWs[split, tok, e0 + mt * 16 + g + (c // 2) * 8] = tot


    # ------------------------------------------------------------------ top-k, one CTA per token
    @cute.kernel
    def topk_kernel(self, mWs: cute.Tensor, mBias: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        sKey = smem.allocate_tensor(Int32, cute.make_layout((NCAND,), stride=(1,)), byte_alignment=16)
        sId = smem.allocate_tensor(Int32, cute.make_layout((NCAND,), stride=(1,)), byte_alignment=16)
        sSc = smem.allocate_tensor(Float32, cute.make_layout((E,), stride=(1,)), byte_alignment=16)     # s by expert
        sOutW = smem.allocate_tensor(Float32, cute.make_layout((TOP_K,), stride=(1,)), byte_alignment=16)
        sOutI = smem.allocate_tensor(Int32, cute.make_layout((TOP_K,), stride=(1,)), byte_alignment=16)
        rb = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)
        cute.autovec_copy(cute.local_tile(mBias, (EPT,), (tidx,)), rb)     # not written by the GEMM
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()            # partials of the GEMM grid
        lg = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)
        part = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)
        cute.autovec_copy(cute.local_tile(mWs[0, row, None], (EPT,), (tidx,)), lg)
        for s in cutlass.range_constexpr(1, self.splits):          # fixed order: deterministic
            cute.autovec_copy(cute.local_tile(mWs[s, row, None], (EPT,), (tidx,)), part)
            for v in cutlass.range_constexpr(EPT):
                lg[v] = lg[v] + part[v]
        sc = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)    # s
        key = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)   # s + bias
        for v in cutlass.range_constexpr(EPT):
            s_ = Float32(1.0) / (Float32(1.0) + cute.math.exp(-lg[v]))
            sc[v] = s_
            key[v] = s_ + rb[v]
        kbits = cute.recast_tensor(key, Int32)
        okey = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Int32)
        for v in cutlass.range_constexpr(EPT):
            okey[v] = ordered_key(kbits[v])
        # phase 1: this warp's top-16 of its 128 experts by the bitonic network (module docstring);
        # position 4 * lane + v holds (hk[v], hi[v]), best first once sorted
        cute.autovec_copy(sc, cute.local_tile(sSc, (EPT,), (tidx,)))     # read in phase 2, after the barrier
        hk = [okey[v] for v in range(EPT)]
        hi = [expert_of(tidx, v) for v in range(EPT)]
        for bit, dist in BITONIC_STEPS:
            if const_expr(dist >= EPT):                # lane ^ (dist / EPT), the same slot
                lanes = dist // EPT
                lower = (lane & lanes) == Int32(0)
                # the lower position keeps the better where p & bit == 0 (bit 0: always), else the worse
                keep_better = lower if const_expr(bit == 0) else lower ^ (((lane * EPT) & bit) != Int32(0))
                for v in cutlass.range_constexpr(EPT):
                    pk = cute.arch.shuffle_sync_bfly(hk[v], offset=lanes)
                    pi = cute.arch.shuffle_sync_bfly(hi[v], offset=lanes)
                    take = keep_better ^ beats(hk[v], hi[v], pk, pi)
                    hk[v] = cutlass.select_(take, pk, hk[v])
                    hi[v] = cutlass.select_(take, pi, hi[v])
            else:                                      # two slots of this lane
                for lo in cutlass.range_constexpr(EPT):
                    up = lo ^ dist
                    if const_expr(lo < up):
                        best_first = ((lane * EPT + lo) & bit) == Int32(0)
                        sw = best_first ^ beats(hk[lo], hi[lo], hk[up], hi[up])
                        hk[lo], hk[up] = cutlass.select_(sw, hk[up], hk[lo]), cutlass.select_(sw, hk[lo], hk[up])
                        hi[lo], hi[up] = cutlass.select_(sw, hi[up], hi[lo]), cutlass.select_(sw, hi[lo], hi[up])
        if lane < TOP_K // EPT:                        # positions 0 .. TOP_K - 1: the warp's list, in order
            for v in cutlass.range_constexpr(EPT):
                sKey[cand_slot(warp, lane * EPT + v)] = hk[v]
                sId[cand_slot(warp, lane * EPT + v)] = hi[v]
        cute.arch.barrier()
        # phase 2: each warp's list is sorted (round order), so a candidate's rank = the sum over the
        # 7 lists of how many of theirs beat it (its own list: its position), by binary searches
        if tidx < NCAND:
            ck = sKey[tidx]
            ci = sId[tidx]
            rank = Int32(0)
            for w2 in cutlass.range_constexpr(TOPK_WARPS):
                pos = Int32(0)
                for step in SEARCH_STEPS:
                    q = cand_slot(w2, 0) + pos + (step - 1)
                    pos = pos + cutlass.select_(beats(sKey[q], sId[q], ck, ci), Int32(step), Int32(0))
                q = cand_slot(w2, 0) + pos
                pos = pos + cutlass.select_(beats(sKey[q], sId[q], ck, ci), Int32(1), Int32(0))
                rank = rank + pos
            if rank < TOP_K:
                sOutW[rank] = sSc[ci]
                sOutI[rank] = ci
        cute.arch.barrier()
        if warp == 0:                                  # warp-uniform
            w = Float32(0.0)
            oid = Int32(0)
            if lane < TOP_K:
                w = sOutW[lane]
                oid = sOutI[lane]
            wsum = w
            for off in cutlass.range_constexpr(5):
                wsum = wsum + cute.arch.shuffle_sync_bfly(wsum, offset=1 << (4 - off))
            if lane < TOP_K:
                mTW[row, lane] = w / wsum * ROUTED_SCALING_FACTOR
                mIds[row, lane] = oid


class ByBatch:
    """The two compiled paths behind one callable: B <= B_SWITCH takes the small one, larger B the
    row-split one; each sums its own workspace of partial logits."""

    def __init__(self, small, large):
        self.small = small
        self.large = large

    def __call__(self, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
        large = x.shape[0] > B_SWITCH
        (self.large if large else self.small)(x, router_weight, e_score_bias, workspace(x.device, large),
                                              topk_weights, topk_ids)


def compile(tp: int, options: str, **static):
    """Batch is symbolic; the same kernels serve TP8 and TP16 (the router is replicated)."""
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, H), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (E, H), stride_order=(1, 0), assumed_align=16)
    bias = fake(Float32, (E,), assumed_align=16)
    tw = fake(Float32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    ids = fake(Int32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    paths = []
    for large, splits in ((False, CTA_SPLITS), (True, RS_CTA_SPLITS)):
        ws = fake(Float32, (splits, B_MAX, E), stride_order=(2, 1, 0), assumed_align=16)
        paths.append(cute.compile(MoERouter(large), x, w, bias, ws, tw, ids, stream, options=options))
    return ByBatch(*paths)


_WORKSPACE: dict[tuple[str, int, bool], torch.Tensor] = {}


def workspace(device: torch.device, large: bool = False) -> torch.Tensor:
    """Partial logits [splits, 64, E] fp32 of one path. Allocate before CUDA-graph capture (first
    eager calls: one at B <= B_SWITCH and one above)."""
    key = (device.type, device.index if device.index is not None else torch.cuda.current_device(), large)
    if key not in _WORKSPACE:
        splits = RS_CTA_SPLITS if large else CTA_SPLITS
        _WORKSPACE[key] = torch.empty((splits, B_MAX, E), dtype=torch.float32, device=device)
    return _WORKSPACE[key]


def launch(compiled, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
    compiled(x, router_weight, e_score_bias, topk_weights, topk_ids)
