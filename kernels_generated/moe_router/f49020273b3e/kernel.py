"""moe_router candidate: one kernel - tensor-core (mma.sync bf16, swap-AB) router GEMM, then the
top-16 of each token done by the last CTAs to finish (fused: no second launch).

Rendered from prompts/kernels/moe_router/mma_fused.py.j2 with
    m_tiles=2 n_tiles=1 warps=4 cta_splits=8 pdl=False

Math (reference_impls/moe_router.py):
    logits = x @ W^T (fp32 accumulate), s = sigmoid(logits), ids = top16(s + bias),
    w = s[ids] / sum(s[ids]) * 1.0
GEMM (the mma_topk family's): mma.sync.m16n8k16 swap-AB, 16 expert rows of W on M and 8 tokens
on N, weights in registers and read from HBM once for all B, grid (E / (16 * M_TILES),
CTA_SPLITS), warps split K and are summed in warp order through shared memory; fp32 partial
logits [CTA_SPLITS, 64, E].
Tail (fused): after writing its partials a CTA takes a ticket (atomic add on a device counter,
acq_rel). The CTAs holding the last B tickets each own one token: they wait until every ticket
is taken (all partials written), then do that token's top-16 with the CTA's 32 * WARPS threads;
the other CTAs exit. The grid (at most 264 CTAs of <= 128 threads: 2 per SM of an H200) fits on
the GPU at once, so a waiting CTA never keeps a CTA that has not started from a slot. The last
token CTA to finish zeroes both counters for the next call.
Top-16 of one token: thread t owns the 4-expert vectors t + 32 * WARPS * j (16-byte loads; the
vectors past E, a whole warp's or none, are retired slots), sums the CTA_SPLITS partials in
split order (deterministic), keys s + bias as order-preserving int32.
Phase 1: each warp's top-16 of its experts in 16 rounds of (lane argmax, redux.sync max of the
key, redux.sync min of the ids holding it). The global top-16 is a subset of the union of the
per-warp lists. Phase 2: each of the 16 * WARPS candidates counts the candidates that beat it
((key, -id) order); that rank is its sorted position, ranks < 16 are the output: ties go to the
lower expert id. Warp 0 sums the 16 scores with a butterfly.
The workspace (partials and the two counters) lives in a per-device cache: calls must not run
concurrently on two streams of one device.
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
N_TILES = 1                   # 8-token MMA tiles (B <= 8 * N_TILES per pass)
WARPS = 4
CTA_SPLITS = 8
PDL = False

ROWS_CTA = 16 * M_TILES
N_BLOCKS = E // ROWS_CTA
N_CTAS = N_BLOCKS * CTA_SPLITS            # tickets per call
K_W = H // (CTA_SPLITS * WARPS)           # K columns per warp
KB = K_W // 32                            # 32-wide K blocks per warp (two MMA k-steps each)
FRAG = M_TILES * N_TILES * 4              # fp32 accumulators per lane
TK_THREADS = 32 * WARPS                   # the top-k of one token uses the whole CTA
EVEC = 4                                  # fp32 per 16-byte load of partials / bias
N_EVEC = E // EVEC                        # 224 expert vectors
VPT = (N_EVEC + TK_THREADS - 1) // TK_THREADS   # vectors per thread (the last ones may lie past E)
EPT = EVEC * VPT                          # expert slots per thread
NCAND = WARPS * TOP_K                     # phase-1 candidates
INT_MIN = -2147483647 - 1                 # below every finite key's ordered int (a retired slot)
assert E % ROWS_CTA == 0 and H % (CTA_SPLITS * WARPS * 32) == 0
assert (FRAG * 32) % (32 * WARPS) == 0
assert NCAND <= TK_THREADS and B_MAX <= N_CTAS and TK_THREADS % 32 == 0
assert (N_EVEC % TK_THREADS) % 32 == 0     # a warp's vectors past E: all or none (warp-uniform)


def expert_of(tidx, v):
    """Expert id in register slot v of thread tidx: vector j = v // 4 of the thread is expert
    vector tidx + TK_THREADS * j (ascending in v: slot order is id order); >= E: no expert."""
    return EVEC * (tidx + TK_THREADS * (v // EVEC)) + v % EVEC


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


def frag_pos(idx):
    """Accumulator index -> (m-tile, n-tile, c register) in the layout used below."""
    return idx // (N_TILES * 4), (idx // 4) % N_TILES, idx % 4


class MoERouter:
    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mWs: cute.Tensor,
                 mCnt: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor, stream: cuda.CUstream):
        self.gemm_kernel(mX, mW, mWs, mBias, mCnt, mTW, mIds).launch(
            grid=[N_BLOCKS, CTA_SPLITS, 1], block=[32 * WARPS, 1, 1], stream=stream, use_pdl=PDL)

    # ------------------------------------------------------------------ GEMM (partials)
    @cute.kernel
    def gemm_kernel(self, mX: cute.Tensor, mW: cute.Tensor, mWs: cute.Tensor, mBias: cute.Tensor, mCnt: cute.Tensor,
                    mTW: cute.Tensor, mIds: cute.Tensor):
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
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()    # weights are constant: in flight before the wait; x, workspace, counters after
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(N_TILES)]
               for _ in range(M_TILES)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        smem = cutlass.memory.SmemAllocator()
        sRed = smem.allocate_tensor(Float32, cute.make_layout((WARPS, FRAG, 32), stride=(FRAG * 32, 32, 1)),
                                    byte_alignment=16)
        tail_smem = self.tail_smem(smem)
        # token chunks of 8 * N_TILES reuse the weight registers: any B is served by one pass over W
        for ch in cutlass.range(cute.ceil_div(M, 8 * N_TILES), unroll=1):
            tok0 = ch * (8 * N_TILES)
            for mt in cutlass.range_constexpr(M_TILES):
                for nt in cutlass.range_constexpr(N_TILES):
                    acc[mt][nt].fill(0.0)
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
                                cute.gemm(atom, acc[mt][nt], a, b, acc[mt][nt])
            # CTA reduction over warps in fixed order through shared memory (deterministic)
            cute.arch.barrier()                                 # the previous chunk's readers are done
            for idx in cutlass.range_constexpr(FRAG):
                mt, nt, c = frag_pos(idx)
                sRed[warp, idx, lane] = acc[mt][nt][c]
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
        self.fused_tail(mWs, mBias, mCnt, mTW, mIds, tail_smem, tidx, warp, lane)


    # ------------------------------------------------------------------ fused top-k tail
    def tail_smem(self, smem):
        """Shared buffers of the tail, from the GEMM's allocator (no aliasing with sRed)."""
        def buf(dtype, n):
            return smem.allocate_tensor(dtype, cute.make_layout((n,), stride=(1,)), byte_alignment=16)
        return buf(Int32, 4), buf(Int32, NCAND), buf(Int32, NCAND), buf(Float32, NCAND), \
            buf(Float32, TOP_K), buf(Int32, TOP_K)

    @cute.jit
    def fused_tail(self, mWs, mBias, mCnt, mTW, mIds, tail_smem, tidx, warp, lane):
        sTick, sKey, sId, sSc, sOutW, sOutI = tail_smem
        M = mTW.shape[0]
        cute.arch.fence_acq_rel_gpu()                  # this thread's partials before the ticket
        cute.arch.barrier()
        if tidx == 0:
            sTick[0] = cute.arch.atomic_add(mCnt.iterator, Int32(1), sem="acq_rel", scope="gpu")
        cute.arch.barrier()
        row = sTick[0] - (N_CTAS - M)
        if row >= 0:                                   # CTA-uniform: one of the last M tickets
            if tidx == 0:
                seen = cute.arch.atomic_add(mCnt.iterator, Int32(0), sem="acquire", scope="gpu")
                while seen < N_CTAS:
                    seen = cute.arch.atomic_add(mCnt.iterator, Int32(0), sem="acquire", scope="gpu")
            cute.arch.barrier()
            cute.arch.fence_acq_rel_gpu()              # see every CTA's partials
            self.topk_row(mWs, mBias, mTW, mIds, row, sKey, sId, sSc, sOutW, sOutI, tidx, warp, lane)
            cute.arch.barrier()
            if tidx == 0:
                done = cute.arch.atomic_add(mCnt.iterator + 1, Int32(1), sem="acq_rel", scope="gpu")
                if done == M - 1:                      # every token CTA is past its wait
                    mCnt[0] = Int32(0)
                    mCnt[1] = Int32(0)

    @cute.jit
    def topk_row(self, mWs, mBias, mTW, mIds, row, sKey, sId, sSc, sOutW, sOutI, tidx, warp, lane):
        lg = [cute.make_rmem_tensor(cute.make_layout((EVEC,), stride=(1,)), Float32) for _ in range(VPT)]
        rb = [cute.make_rmem_tensor(cute.make_layout((EVEC,), stride=(1,)), Float32) for _ in range(VPT)]
        part = cute.make_rmem_tensor(cute.make_layout((EVEC,), stride=(1,)), Float32)
        for j in cutlass.range_constexpr(VPT):
            lg[j].fill(0.0)
            rb[j].fill(0.0)
            vj = tidx + TK_THREADS * j
            if vj < N_EVEC:                            # warp-uniform
                cute.autovec_copy(cute.local_tile(mBias, (EVEC,), (vj,)), rb[j])
                cute.autovec_copy(cute.local_tile(mWs[0, row, None], (EVEC,), (vj,)), lg[j])
                for s in cutlass.range_constexpr(1, CTA_SPLITS):      # fixed order: deterministic
                    cute.autovec_copy(cute.local_tile(mWs[s, row, None], (EVEC,), (vj,)), part)
                    for q in cutlass.range_constexpr(EVEC):
                        lg[j][q] = lg[j][q] + part[q]
        sc = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)    # s
        key = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Float32)   # s + bias
        for v in cutlass.range_constexpr(EPT):
            s_ = Float32(1.0) / (Float32(1.0) + cute.math.exp(-lg[v // EVEC][v % EVEC]))
            sc[v] = s_
            key[v] = s_ + rb[v // EVEC][v % EVEC]
        kbits = cute.recast_tensor(key, Int32)
        okey = cute.make_rmem_tensor(cute.make_layout((EPT,), stride=(1,)), Int32)
        for v in cutlass.range_constexpr(EPT):         # a slot past E is retired from the start
            okey[v] = cutlass.select_(expert_of(tidx, v) < E, ordered_key(kbits[v]), Int32(INT_MIN))
        # phase 1: this warp's top-16 (warp-uniform: all 32 lanes take part)
        for rnd in cutlass.range_constexpr(TOP_K):
            bk, bj = lane_argmax([(okey[v], Int32(v)) for v in range(EPT)])
            top = cute.arch.warp_redux_sync(bk, "max")
            my_id = expert_of(tidx, bj)
            bi = cute.arch.warp_redux_sync(cutlass.select_(bk == top, my_id, Int32(E)), "min")
            won = my_id == bi                          # exactly one lane: ids are distinct
            mine = Float32(0.0)
            for v in cutlass.range_constexpr(EPT):
                hit = won & (bj == v)
                okey[v] = cutlass.select_(hit, Int32(INT_MIN), okey[v])
                mine = cutlass.select_(hit, sc[v], mine)
            if won:
                sKey[cand_slot(warp, rnd)] = top
                sId[cand_slot(warp, rnd)] = bi
                sSc[cand_slot(warp, rnd)] = mine
        cute.arch.barrier()
        # phase 2: rank of each candidate among the NCAND = its sorted output position
        if tidx < NCAND:
            ck = sKey[tidx]
            ci = sId[tidx]
            rank = Int32(0)
            for j in cutlass.range(NCAND, unroll=16):
                kj = sKey[j]
                beats = (kj > ck) | ((kj == ck) & (sId[j] < ci))
                rank = rank + cutlass.select_(beats, Int32(1), Int32(0))
            if rank < TOP_K:
                sOutW[rank] = sSc[tidx]
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


def compile(tp: int, options: str, **static):
    """Batch is symbolic; the same kernel serves TP8 and TP16 (the router is replicated)."""
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, H), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (E, H), stride_order=(1, 0), assumed_align=16)
    bias = fake(Float32, (E,), assumed_align=16)
    ws = fake(Float32, (CTA_SPLITS, B_MAX, E), stride_order=(2, 1, 0), assumed_align=16)
    cnt = fake(Int32, (4,), assumed_align=16)
    tw = fake(Float32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    ids = fake(Int32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(MoERouter(), x, w, bias, ws, cnt, tw, ids, stream, options=options)


_WORKSPACE: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def workspace(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial logits [CTA_SPLITS, 64, E] fp32 and the ticket / done counters (zeroed once;
    every call leaves them zero). Allocate before CUDA-graph capture (first eager call)."""
    key = (device.type, device.index if device.index is not None else torch.cuda.current_device())
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.empty((CTA_SPLITS, B_MAX, E), dtype=torch.float32, device=device),
                           torch.zeros((4,), dtype=torch.int32, device=device))
    return _WORKSPACE[key]


def launch(compiled, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
    ws, cnt = workspace(x.device)
    compiled(x, router_weight, e_score_bias, ws, cnt, topk_weights, topk_ids)
