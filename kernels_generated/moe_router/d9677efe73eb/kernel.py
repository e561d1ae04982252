"""moe_router candidate: tensor-core (mma.sync bf16, swap-AB) router GEMM + warp-per-token top-16.

Rendered from prompts/kernels/moe_router/mma_topk.py.j2 with
    m_tiles=2 n_tiles=1 warps=4 cta_splits=8
    topk_warps=1 pdl=True topk_redux=False

Math (reference_impls/moe_router.py):
    logits = x @ W^T (fp32 accumulate), s = sigmoid(logits), ids = top16(s + bias),
    w = s[ids] / sum(s[ids]) * 1.0
GEMM, swap-AB: mma.sync.m16n8k16 (bf16 in, fp32 accumulate) with 16 expert rows of W on the
MMA M axis and 8 tokens on N. Weights stay in registers while token chunks of 8 * N_TILES
(N_TILES n-tiles) are processed in turn, so each weight byte is read from HBM once for all B. Grid (E / (16 * M_TILES), CTA_SPLITS); the WARPS
warps of a CTA share its rows and split its K slice; warp w streams K_W = H / (CTA_SPLITS * WARPS)
columns as KB = K_W / 32 blocks of 32, every weight load of the warp issued before any math.
K order inside a 32-block is permuted (a dot product is order-free): lane (g = lane / 4,
t = lane % 4) loads 16 contiguous bytes at k = 8t .. 8t+7 of W rows g and g+8 and of x row g;
elements 4s .. 4s+3 feed MMA k-step s in the PTX fragment order, so A and B use the same
logical k and every global load is a 16-byte vector.
The CTA sums its warps' accumulators through shared memory in warp order (deterministic)
and writes fp32 partial logits [CTA_SPLITS, 64, E]; the top-k kernel sums the partials in
split order. Top-k: one warp per token, lane l owns experts ((c*32 + l)*4 + v), 16 rounds of
argmax (lane-local tree, then a butterfly; ties go to the lower expert id).
Two kernels from one @cute.jit, programmatic dependent launch (the top-k grid waits
on griddepcontrol). The workspace lives in a per-device cache: calls must not run
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
N_TILES = 1                   # 8-token MMA tiles (B <= 8 * N_TILES)
WARPS = 4
CTA_SPLITS = 8
TOPK_WARPS = 1
PDL = True

ROWS_CTA = 16 * M_TILES
N_BLOCKS = E // ROWS_CTA
K_W = H // (CTA_SPLITS * WARPS)           # K columns per warp
KB = K_W // 32                            # 32-wide K blocks per warp (two MMA k-steps each)
FRAG = M_TILES * N_TILES * 4              # fp32 accumulators per lane
EPL = E // 32                             # experts per lane in the top-k (28)
CHUNKS = EPL // 4                         # 16-byte fp32 vectors per lane (7)
assert E % ROWS_CTA == 0 and H % (CTA_SPLITS * WARPS * 32) == 0
assert (FRAG * 32) % (32 * WARPS) == 0
assert E % 128 == 0 and TOP_K <= 32


def expert_of(lane, slot):
    """Expert id held in register slot `slot` (0..27) of `lane` in the top-k."""
    return ((slot // 4) * 32 + lane) * 4 + slot % 4


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
                 mTW: cute.Tensor, mIds: cute.Tensor, stream: cuda.CUstream):
        M = mX.shape[0]
        self.gemm_kernel(mX, mW, mWs).launch(
            grid=[N_BLOCKS, CTA_SPLITS, 1], block=[32 * WARPS, 1, 1], stream=stream)
        self.topk_kernel(mWs, mBias, mTW, mIds).launch(
            grid=[cute.ceil_div(M, TOPK_WARPS), 1, 1], block=[32 * TOPK_WARPS, 1, 1], stream=stream,
            use_pdl=PDL)

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
        acc = [[cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), Float32) for _ in range(N_TILES)]
               for _ in range(M_TILES)]
        a = cute.make_rmem_tensor(cute.make_layout((8, 1, 1)), BFloat16)
        b = cute.make_rmem_tensor(cute.make_layout((4, 1, 1)), BFloat16)
        rx = cute.make_rmem_tensor(cute.make_layout((VEC,), stride=(1,)), BFloat16)
        smem = cutlass.memory.SmemAllocator()
        sRed = smem.allocate_tensor(Float32, cute.make_layout((WARPS, FRAG, 32), stride=(FRAG * 32, 32, 1)),
                                    byte_alignment=16)
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
            for s in cutlass.range_constexpr(1, CTA_SPLITS):      # fixed order: deterministic
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
        for rnd in cutlass.range(TOP_K, unroll=1):
            bk, bj = lane_argmax([(key[j], Int32(j)) for j in range(EPL)])
            my_slot = bj
            bi = expert_of(lane, bj)
            for off in cutlass.range_constexpr(5):
                ok = cute.arch.shuffle_sync_bfly(bk, offset=1 << (4 - off))
                oi = cute.arch.shuffle_sync_bfly(bi, offset=1 << (4 - off))
                take = (ok > bk) | ((ok == bk) & (oi < bi))
                bk = cutlass.select_(take, ok, bk)
                bi = cutlass.select_(take, oi, bi)
            # the winner's owner lane retires it and broadcasts its unbiased score
            won = expert_of(lane, my_slot) == bi
            mine = Float32(0.0)
            for j in cutlass.range_constexpr(EPL):
                hit = won & (my_slot == j)
                key[j] = cutlass.select_(hit, -Float32.inf, key[j])
                mine = cutlass.select_(hit, sc[j], mine)
            owner = (bi // 4) % 32
            bs = cute.arch.shuffle_sync(mine, owner)
            wsum = wsum + bs
            my_w = cutlass.select_(lane == rnd, bs, my_w)
            my_id = cutlass.select_(lane == rnd, bi, my_id)
        if lane < TOP_K:
            mTW[row, lane] = my_w / wsum * ROUTED_SCALING_FACTOR
            mIds[row, lane] = my_id

    @cute.kernel
    def topk_kernel(self, mWs: cute.Tensor, mBias: cute.Tensor, mTW: cute.Tensor, mIds: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        bidx, _, _ = cute.arch.block_idx()
        if const_expr(PDL):
            cute.arch.griddepcontrol_wait()            # partials of the GEMM grid
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
    ws = fake(Float32, (CTA_SPLITS, B_MAX, E), stride_order=(2, 1, 0), assumed_align=16)
    tw = fake(Float32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    ids = fake(Int32, (m, TOP_K), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(MoERouter(), x, w, bias, ws, tw, ids, stream, options=options)


_WORKSPACE: dict[tuple[str, int], torch.Tensor] = {}


def workspace(device: torch.device) -> torch.Tensor:
    """Partial logits [CTA_SPLITS, 64, E] fp32. Allocate before CUDA-graph capture (first eager call)."""
    key = (device.type, device.index if device.index is not None else torch.cuda.current_device())
    if key not in _WORKSPACE:
        _WORKSPACE[key] = torch.empty((CTA_SPLITS, B_MAX, E), dtype=torch.float32, device=device)
    return _WORKSPACE[key]


def launch(compiled, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
    compiled(x, router_weight, e_score_bias, workspace(x.device), topk_weights, topk_ids)
