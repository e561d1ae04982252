"""moe_router candidate: split-K router GEMV (fp32 logits) + warp-per-token top-16.

Rendered from prompts/kernels/moe_router/splitk_topk.py.j2 with
    warps=4 rows_per_warp=2 split_k=4 m_tile=8
    load_group=7 topk_warps=2 fused=False pdl=True

Math (reference_impls/moe_router.py):
    logits = x @ W^T (fp32 accumulate), s = sigmoid(logits), ids = top16(s + bias),
    w = s[ids] / sum(s[ids]) * 1.0
GEMV: grid (E / (WARPS*ROWS), SPLITS, ceil(B / M_TILE)). A warp owns ROWS expert rows and one
K slice; each lane streams 16-byte weight vectors (8 bf16) at vector index
split*ITERS*32 + it*32 + lane, so a warp-wide load covers 512 contiguous bytes of a row.
x rows are re-read per vector from L1/L2 (at most 64 x 14 KB). fp32 partial sums go to a
workspace [SPLITS, 64, E]; the sum over splits is taken in fixed order (deterministic).
Top-k: one warp per token; lane l owns experts ((c*32 + l)*4 + v) for c < 7, v < 4 (28
experts, read as 16-byte fp32 vectors); 16 rounds of argmax: a lane-local tree, then a
5-step butterfly on (key, score, id) with ties going to the lower expert id.
Two kernels launched from one @cute.jit host function (programmatic dependent
launch: the top-k grid starts early and waits on griddepcontrol).
The workspace (and counter) live in a per-device cache: calls must not run concurrently on
two streams of one device.
"""
from __future__ import annotations

import operator

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
from cutlass import BFloat16, Float32, Int32, const_expr

H, E, TOP_K = 7168, 896, 16
B_MAX = 64
ROUTED_SCALING_FACTOR = 1.0
VEC = 8                                   # bf16 per 16-byte load
WARPS = 4
ROWS = 2
SPLITS = 4
M_TILE = 8
LOAD_GROUP = 7             # K iterations whose weight loads issue together
TOPK_WARPS = 2
FUSED = False
PDL = True

N_BLOCKS = E // (WARPS * ROWS)            # CTAs along the expert axis
ITERS = H // (SPLITS * 32 * VEC)          # 16-byte vectors per lane per K slice
M_TILES_MAX = (B_MAX + M_TILE - 1) // M_TILE
EPL = E // 32                             # experts per lane in the top-k (28)
CHUNKS = EPL // 4                         # 16-byte fp32 vectors per lane (7)
assert E % (WARPS * ROWS) == 0, "expert rows must tile exactly"
assert H % (SPLITS * 32 * VEC) == 0, "K slices must be whole 512-byte warp vectors"
assert ITERS % LOAD_GROUP == 0
assert E % 128 == 0 and TOP_K <= 32


def k_vector(split, it, lane):
    """16-byte vector index along K read by `lane` at iteration `it` of slice `split`."""
    return split * (ITERS * 32) + it * 32 + lane


def expert_of(lane, slot):
    """Expert id held in register slot `slot` (0..27) of `lane` in the top-k."""
    return ((slot // 4) * 32 + lane) * 4 + slot % 4


def lane_argmax(cand):
    """Trace-time tree argmax over [(key, score, slot)] in ascending slot order: the left
    operand always holds the lower slots (= lower expert ids), so a tie keeps the left."""
    while len(cand) > 1:
        nxt = []
        for p in range(0, len(cand) - 1, 2):
            (ka, sa, ja), (kb, sb, jb) = cand[p], cand[p + 1]
            take_b = kb > ka
            nxt.append((cutlass.select_(take_b, kb, ka), cutlass.select_(take_b, sb, sa),
                        cutlass.select_(take_b, jb, ja)))
        if len(cand) % 2:
            nxt.append(cand[-1])
        cand = nxt
    return cand[0]


class MoERouter:
    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mWs: cute.Tensor,
                 mCnt: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor, stream: cuda.CUstream):
        M = mX.shape[0]
        self.gemv_kernel(mX, mW, mBias, mWs, mCnt, mTW, mIds).launch(
            grid=[N_BLOCKS, SPLITS, cute.ceil_div(M, M_TILE)], block=[32 * WARPS, 1, 1], stream=stream)
        if const_expr(not FUSED):
            self.topk_kernel(mWs, mBias, mTW, mIds).launch(
                grid=[cute.ceil_div(M, TOPK_WARPS), 1, 1], block=[32 * TOPK_WARPS, 1, 1], stream=stream,
                use_pdl=PDL)

    # ------------------------------------------------------------------ GEMV (partials)
    @cute.jit
    def gemv_partial(self, mX: cute.Tensor, mW: cute.Tensor, mWs: cute.Tensor,
                     bn: Int32, split: Int32, bm: Int32, warp: Int32, lane: Int32):
        M = mX.shape[0]
        n0 = (bn * WARPS + warp) * ROWS
        m0 = bm * M_TILE
        # row-major fragments: a bare shape would be column-major and scalarize the copies
        acc = cute.make_rmem_tensor(cute.make_layout((M_TILE, ROWS), stride=(ROWS, 1)), Float32)
        acc.fill(0.0)
        rw = cute.make_rmem_tensor(cute.make_layout((LOAD_GROUP, ROWS, VEC), stride=(ROWS * VEC, VEC, 1)), BFloat16)
        wf = cute.make_rmem_tensor(cute.make_layout((ROWS, VEC), stride=(VEC, 1)), Float32)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        xf = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), Float32)
        for g in cutlass.range_constexpr(ITERS // LOAD_GROUP):
            # weight vectors of LOAD_GROUP iterations in flight before any math
            for i in cutlass.range_constexpr(LOAD_GROUP):
                kv = k_vector(split, g * LOAD_GROUP + i, lane)
                for r in cutlass.range_constexpr(ROWS):
                    cute.autovec_copy(cute.local_tile(mW[n0 + r, None], (VEC,), (kv,)), rw[i, r, None])
            for i in cutlass.range_constexpr(LOAD_GROUP):
                kv = k_vector(split, g * LOAD_GROUP + i, lane)
                for r in cutlass.range_constexpr(ROWS):
                    wf[r, None].store(rw[i, r, None].load().to(Float32))
                for m in cutlass.range_constexpr(M_TILE):
                    if m0 + m < M:                     # warp-uniform
                        cute.autovec_copy(cute.local_tile(mX[m0 + m, None], (VEC,), (kv,)), rx)
                        xf.store(rx.load().to(Float32))
                        for r in cutlass.range_constexpr(ROWS):
                            a = acc[m, r]
                            for v in cutlass.range_constexpr(VEC):
                                a = a + xf[v] * wf[r, v]
                            acc[m, r] = a
        for m in cutlass.range_constexpr(M_TILE):
            if m0 + m < M:                             # warp-uniform: all 32 lanes shuffle
                for r in cutlass.range_constexpr(ROWS):
                    tot = cute.arch.warp_reduction(acc[m, r], operator.add)
                    if lane == 0:
                        mWs[split, m0 + m, n0 + r] = tot

    # ------------------------------------------------------------------ top-k of one token
    @cute.jit
    def topk_row(self, mWs: cute.Tensor, mBias: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor,
                 row: Int32, lane: Int32):
        key = cute.make_rmem_tensor(cute.make_layout((EPL,), stride=(1,)), Float32)   # s + bias
        sc = cute.make_rmem_tensor(cute.make_layout((EPL,), stride=(1,)), Float32)    # s
        lg = cute.make_rmem_tensor(cute.make_layout((4,), stride=(1,)), Float32)
        part = cute.make_rmem_tensor(cute.make_layout((4,), stride=(1,)), Float32)
        rb = cute.make_rmem_tensor(cute.make_layout((4,), stride=(1,)), Float32)
        for c in cutlass.range_constexpr(CHUNKS):
            cute.autovec_copy(cute.local_tile(mWs[0, row, None], (4,), (c * 32 + lane,)), lg)
            for s in cutlass.range_constexpr(1, SPLITS):          # fixed order: deterministic
                cute.autovec_copy(cute.local_tile(mWs[s, row, None], (4,), (c * 32 + lane,)), part)
                for v in cutlass.range_constexpr(4):
                    lg[v] = lg[v] + part[v]
            cute.autovec_copy(cute.local_tile(mBias, (4,), (c * 32 + lane,)), rb)
            for v in cutlass.range_constexpr(4):
                s_ = Float32(1.0) / (Float32(1.0) + cute.math.exp(-lg[v]))
                sc[c * 4 + v] = s_
                key[c * 4 + v] = s_ + rb[v]
        my_w = Float32(0.0)
        my_id = Int32(0)
        wsum = Float32(0.0)
        for rnd in cutlass.range(TOP_K, unroll=1):     # rolled: one copy of the round body
            # lane-local argmax: a tree over slots; the left operand always holds lower
            # expert ids (slot order is id order within a lane), so ties keep the left
            bk, bs, bj = lane_argmax([(key[j], sc[j], Int32(j)) for j in range(EPL)])
            my_slot = bj
            bi = expert_of(lane, bj)
            # warp argmax butterfly; every lane ends with the winner; ties -> lower id
            for off in cutlass.range_constexpr(5):
                ok = cute.arch.shuffle_sync_bfly(bk, offset=1 << (4 - off))
                os_ = cute.arch.shuffle_sync_bfly(bs, offset=1 << (4 - off))
                oi = cute.arch.shuffle_sync_bfly(bi, offset=1 << (4 - off))
                take = (ok > bk) | ((ok == bk) & (oi < bi))
                bk = cutlass.select_(take, ok, bk)
                bs = cutlass.select_(take, os_, bs)
                bi = cutlass.select_(take, oi, bi)
            # retire the winner in its owner lane (the lane whose local best it was)
            won = expert_of(lane, my_slot) == bi
            for j in cutlass.range_constexpr(EPL):
                key[j] = cutlass.select_(won & (my_slot == j), -Float32.inf, key[j])
            wsum = wsum + bs
            my_w = cutlass.select_(lane == rnd, bs, my_w)
            my_id = cutlass.select_(lane == rnd, bi, my_id)
        if lane < TOP_K:
            mTW[row, lane] = my_w / wsum * ROUTED_SCALING_FACTOR
            mIds[row, lane] = my_id

    # ------------------------------------------------------------------ kernels
    @cute.kernel
    def gemv_kernel(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mWs: cute.Tensor,
                    mCnt: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        bn, split, bm = cute.arch.block_idx()
        if const_expr(PDL and not FUSED):
            cute.arch.griddepcontrol_launch_dependents()
        self.gemv_partial(mX, mW, mWs, bn, split, bm, warp, lane)
        if const_expr(FUSED):
            smem = cutlass.memory.SmemAllocator()
            flag = smem.allocate_tensor(Int32, cute.make_layout((1,)), byte_alignment=16)
            tidx, _, _ = cute.arch.thread_idx()
            cute.arch.fence_acq_rel_gpu()              # this thread's partials before the count
            cute.arch.barrier()
            if tidx == 0:
                old = cute.arch.atomic_add(mCnt.iterator + bm, Int32(1), sem="acq_rel", scope="gpu")
                last = old == N_BLOCKS * SPLITS - 1
                flag[0] = cutlass.select_(last, Int32(1), Int32(0))
                if last:
                    mCnt[bm] = Int32(0)                # ready for the next launch
            cute.arch.barrier()
            if flag[0] == 1:                           # CTA-uniform
                cute.arch.fence_acq_rel_gpu()          # see every CTA's partials
                M = mX.shape[0]
                for t in cutlass.range((M_TILE + WARPS - 1) // WARPS, unroll=1):
                    local = t * WARPS + warp
                    row = bm * M_TILE + local
                    if (local < M_TILE) & (row < M):   # warp-uniform
                        self.topk_row(mWs, mBias, mTW, mIds, row, lane)

    @cute.kernel
    def topk_kernel(self, mWs: cute.Tensor, mBias: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        bidx, _, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()            # partials of the GEMV grid
        row = bidx * TOPK_WARPS + warp
        if row < mTW.shape[0]:                         # warp-uniform
            self.topk_row(mWs, mBias, mTW, mIds, row, lane)


def compile(tp: int, options: str, **static):
    """Batch is symbolic; the same kernel serves TP8 and TP16 (the router is replicated)."""
    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(BFloat16, (m, H), stride_order=(1, 0), assumed_align=16)
    w = fake(BFloat16, (E, H), stride_order=(1, 0), assumed_align=16)
    bias = fake(Float32, (E,), assumed_align=16)
    ws = fake(Float32, (SPLITS, B_MAX, E), stride_order=(2, 1, 0), assumed_align=16)
    cnt = fake(Int32, (M_TILES_MAX,), assumed_align=16)
    tw = fake(Float32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    ids = fake(Int32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(MoERouter(), x, w, bias, ws, cnt, tw, ids, stream, options=options)


_WORKSPACE: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def workspace(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial logits [SPLITS, 64, E] fp32 and the m-tile counters (zeroed once; the fused
    kernel leaves them zero). Allocate before CUDA-graph capture (first eager call)."""
    key = (device.type, device.index if device.index is not None else torch.cuda.current_device())
    if key not in _WORKSPACE:
        _WORKSPACE[key] = (torch.empty((SPLITS, B_MAX, E), dtype=torch.float32, device=device),
                           torch.zeros((M_TILES_MAX,), dtype=torch.int32, device=device))
    return _WORKSPACE[key]


def launch(compiled, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
    ws, cnt = workspace(x.device)
    compiled(x, router_weight, e_score_bias, ws, cnt, topk_weights, topk_ids)
