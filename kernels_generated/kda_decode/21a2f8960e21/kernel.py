"""kda_decode candidate (family `persist`): a persistent kernel that streams the state through
shared memory, STAGES - 1 tiles ahead of the math. UNVERIFIED on a GPU (compiled for sm_90a /
sm_103a on a CPU only; correctness and timing not yet run).

Rendered from prompts/kernels/kda_decode/persist.py.j2 with stages=2 ctas_per_sm=1 threads_per_row=32 warps=16 hoist=True (b and A_log by cp.async with the stage, rcp.approx sigmoid, outputs through shared memory) split_wait=True (a tile's small inputs and its state in two cp.async groups, the state awaited only before the delta rule)
Math as in the `fused` family (per token b and local head hd, D = 128, HD = h*D):
    y = silu(sum_t window[t] * w_conv[t]), window = [conv_state[:, 0..2], qkv]; conv_state <- window[1:]
    q = y_q * rsqrt(sum y_q^2 + 1e-6) * D^-0.5 ; k = y_k * rsqrt(sum y_k^2 + 1e-6) ; v = y_v
    decay = exp(-5 * sigmoid(exp(A_log[hd]) * (f + dt_bias)))  [D]  ;  beta = sigmoid(b[hd])
    S = S * decay[None, :] ; u = beta * (v - S @ k) ; S = S + outer(u, k) ; o = S @ q (fp32 S)
    o = o * rsqrt(mean(o^2) + 1e-5) * w_norm * sigmoid(g_out) ; S stored in the state dtype
Why: the fused kernel (one CTA per (token, head), state in registers) measured 1.8x the HBM floor at
B=64 on the H200 with DRAM 31% busy: 141 registers allow one CTA per SM, and while a CTA runs its
dependent chain (conv, norms, the row-dot butterflies, the RMSNorm barrier) its SM moves no state
(results/h200/session8: ncu_kda_a7f1bb_b64.txt, state_stream_probe.log). Here each of the CTAS = 132 x per_sm CTAs (per_sm: ctas_per_sm, fewer where shared memory does not fit them)
loops over tiles t = cta, cta + CTAS, ... (t = b * h + head) and keeps STAGES - 1 later tiles' state
and inputs in flight (cp.async into shared memory) while it computes the current one.
Per tile: cp.async of tile it + STAGES - 1 (state with .cg: read once; qkv, conv_state, conv_weight,
f, g_out as 16-byte bf16 vectors; dt_bias fp32), wait for tile it, barrier; conv + SiLU of the 384
channels from shared memory into ybuf (conv_state shift stored by the thread that computed the
channel), decays; barrier; every warp re-reduces the L2 norms; each thread's rows (row = j*ROWS_PER_PASS
+ w*RG + g, its KPL keys at k_lane*KPL) are read from shared memory, updated and stored to global
memory from registers; sum o^2: butterfly over row groups, one partial per warp, barrier (which also
frees the stage for the next prefetch), every thread sums the partials in warp order.
Reduction orders equal `fused` with V_SPLIT = 1 and the same TPR / WARPS.
"""
from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr

D = 128                                   # head dim (K = V = 128)
N_HEADS = 96
CONV_T = 3                                # conv taps kept in the state (kernel 4)
L2_EPS = 1e-6
RMS_EPS = 1e-5
GATE_LOWER = -5.0
Q_SCALE = D ** -0.5
LOG2E = 1.4426950408889634
STAGES = 2                     # tiles in flight per CTA: the current one and STAGES - 1 prefetched
CTAS_PER_SM = 1                # at most: fewer where shared memory or threads do not fit them
TPR = 32               # lanes per state row
WARPS = 16


@cute.jit
def sigmoid(x: Float32) -> Float32:
    return 1.0 / (1.0 + cute.math.exp2(-x * LOG2E, fastmath=True))


@cute.jit
def sigmoid_fast(x: Float32) -> Float32:
    """sigmoid with rcp.approx (about 1 ulp), as the fused family's hoist knob."""
    return cute.arch.rcp_approx(1.0 + cute.math.exp2(-x * LOG2E, fastmath=True))


P_SMS = 132                               # the H200's SMs: the grid is P_SMS x CTAs per SM
P_SMEM_PER_SM = 227 * 1024                # usable shared memory per SM (H200), 1 KiB of it reserved per CTA
# 16-byte vectors staged per tile besides the state: qkv (3 x 128 bf16), conv_state (3 x 128 x 3 bf16),
# conv_weight (3 x 128 x 4 bf16), f and g_out (128 bf16 each), dt_bias (128 fp32)
P_V_QKV, P_V_CS, P_V_CW, P_V_F, P_V_G, P_V_DT = 48, 144, 192, 16, 16, 32
P_SMALL_VECS = P_V_QKV + P_V_CS + P_V_CW + P_V_F + P_V_G + P_V_DT


class KdaPersist:
    """Grid (CTAS,): CTA c runs tiles t = c, c + CTAS, ... of the B * h (token, head) tiles
    (t = b * h + head). Tile t's state (D x D) and its small inputs are staged in shared memory by
    cp.async self.stages - 1 tiles ahead, so the HBM stream of later tiles overlaps this tile's
    dependent chain (conv, norms, delta rule, RMSNorm)."""

    def __init__(self, state_dtype: type[cutlass.Numeric], heads: int, stages: int, tpr: int, warps: int,
                 ctas_per_sm: int):
        """stages: tiles in flight per CTA (the current one and stages - 1 prefetched); tpr: lanes per
        state row; ctas_per_sm: at most, fewer where shared memory or threads do not fit them."""
        self.sdt = state_dtype
        self.h = heads
        self.stages = stages
        self.tpr = tpr                                          # lane k_lane owns keys [k_lane*kpl, +kpl)
        self.warps = warps
        self.threads = warps * 32
        self.kpl = D // tpr
        self.rg = 32 // tpr                                     # row groups per warp
        self.rows_per_pass = warps * self.rg
        self.rpt = D // self.rows_per_pass                      # rows per thread
        self.nslot_iters = (3 * D + self.threads - 1) // self.threads
        self.row_offs = tuple(tpr >> (i + 1) for i in range(tpr.bit_length() - 1))        # tpr/2, ..., 1
        self.group_offs = tuple(tpr << i for i in range(self.rg.bit_length() - 1))        # tpr, ..., 16
        assert self.rpt * self.rows_per_pass == D and 32 % tpr == 0 and self.rpt >= 1 and stages >= 2
        self.svec = 16 // (state_dtype.width // 8)              # state elements per 16-byte vector
        smem_bytes = self.stages * (D * D * state_dtype.width // 8 + 16 * P_SMALL_VECS) + 4 * (4 * D + self.warps) + 512
        self.per_sm = max(1, min(ctas_per_sm, P_SMEM_PER_SM // (smem_bytes + 1024), 2048 // self.threads))
        self.ctas = P_SMS * self.per_sm

    @cute.jit
    def row_sum(self, x: Float32) -> Float32:
        """Sum over the tpr lanes of a row (xor offsets tpr/2, ..., 1 stay inside the row's lanes)."""
        for i in cutlass.range_constexpr(len(self.row_offs)):
            x = x + cute.arch.shuffle_sync_bfly(x, offset=self.row_offs[i])
        return x

    @cute.jit
    def group_sum(self, x: Float32) -> Float32:
        """Sum over the rg row groups of a warp (xor offsets tpr, ..., 16)."""
        for i in cutlass.range_constexpr(len(self.group_offs)):
            x = x + cute.arch.shuffle_sync_bfly(x, offset=self.group_offs[i])
        return x

    @cute.jit
    def __call__(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
                 mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
                 mO: cute.Tensor, stream: cuda.CUstream):
        if const_expr(self.per_sm > 1):
            # launch bounds: ptxas keeps registers at or below 65536 / (THREADS * per_sm); the carveout
            # (percent of the unified L1 / shared memory) is given so compiling needs no device query
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=[self.ctas, 1, 1], block=[self.threads, 1, 1], stream=stream, max_number_threads=[self.threads, 1, 1],
                min_blocks_per_mp=self.per_sm, preferred_smem_carveout=100)
        else:
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=[self.ctas, 1, 1], block=[self.threads, 1, 1], stream=stream)

    @cute.jit
    def prefetch(self, t: Int32, stg: Int32, tidx: Int32, mQKV: cute.Tensor, mCSf: cute.Tensor, mCWf: cute.Tensor,
                 mF: cute.Tensor, mG: cute.Tensor, mDt: cute.Tensor, mS: cute.Tensor, sS: cute.Tensor,
                 sSmall: cute.Tensor, sDt: cute.Tensor, g2s_bf: cute.CopyAtom, g2s_f32: cute.CopyAtom,
                 g2s_state: cute.CopyAtom, mB: cute.Tensor, mA: cute.Tensor, sScal: cute.Tensor, sA: cute.Tensor,
                 g2s_b32: cute.CopyAtom, g2s_a32: cute.CopyAtom):
        """Issue tile t's cp.asyncs into stage stg (16-byte vectors; thread i copies vectors i, i + THREADS, ...)."""
        bi = t // self.h
        hd = t - bi * self.h
        hv = self.h * (D // 8)                                  # 16-byte bf16 vectors per segment of qkv
        for it in cutlass.range_constexpr((P_SMALL_VECS + self.threads - 1) // self.threads):
            i = it * self.threads + tidx
            dst = cute.local_tile(sSmall[stg, None], (8,), (i,))
            if i < P_V_QKV:                                     # q | k | v of this head
                seg = i // 16
                cute.copy(g2s_bf, cute.local_tile(mQKV[bi, None], (8,), (seg * hv + hd * 16 + i - seg * 16,)), dst)
            elif i < P_V_QKV + P_V_CS:                          # conv_state rows (3 taps per channel)
                j = i - P_V_QKV
                seg = j // 48
                cute.copy(g2s_bf, cute.local_tile(mCSf[bi, None], (8,), (seg * hv * 3 + hd * 48 + j - seg * 48,)), dst)
            elif i < P_V_QKV + P_V_CS + P_V_CW:                 # conv weights (4 taps per channel)
                j = i - P_V_QKV - P_V_CS
                seg = j // 64
                cute.copy(g2s_bf, cute.local_tile(mCWf, (8,), (seg * hv * 4 + hd * 64 + j - seg * 64,)), dst)
            elif i < P_V_QKV + P_V_CS + P_V_CW + P_V_F:
                j = i - P_V_QKV - P_V_CS - P_V_CW
                cute.copy(g2s_bf, cute.local_tile(mF[bi, None], (8,), (hd * 16 + j,)), dst)
            elif i < P_V_QKV + P_V_CS + P_V_CW + P_V_F + P_V_G:
                j = i - P_V_QKV - P_V_CS - P_V_CW - P_V_F
                cute.copy(g2s_bf, cute.local_tile(mG[bi, None], (8,), (hd * 16 + j,)), dst)
            elif i < P_SMALL_VECS:
                j = i - P_SMALL_VECS + P_V_DT
                cute.copy(g2s_f32, cute.local_tile(mDt, (4,), (hd * 32 + j,)), cute.local_tile(sDt[stg, None], (4,), (j,)))
        if tidx == self.threads - 1:                            # b (the bf16 pair holding it) and A_log, 4 bytes each
            cute.copy(g2s_b32, cute.local_tile(mB[bi, None], (2,), (hd // 2,)), cute.local_tile(sScal[stg, None], (2,), (0,)))
            cute.copy(g2s_a32, cute.local_tile(mA, (1,), (hd,)), cute.local_tile(sA[stg, None], (1,), (0,)))

    @cute.jit
    def prefetch_state(self, t: Int32, stg: Int32, tidx: Int32, mS: cute.Tensor, sS: cute.Tensor, g2s_state: cute.CopyAtom):
        """Issue tile t's state cp.asyncs into stage stg. split_wait: they form a commit group of their own,
        after the small inputs', awaited only before the delta rule, so the conv and norms run while it lands."""
        bi = t // self.h
        hd = t - bi * self.h
        for it in cutlass.range_constexpr(D * D // self.svec // self.threads):
            i = it * self.threads + tidx
            row = i // (D // self.svec)
            cv = i - row * (D // self.svec)
            cute.copy(g2s_state, cute.local_tile(mS[bi, hd, row, None], (self.svec,), (cv,)),
                      cute.local_tile(sS[stg, row, None], (self.svec,), (cv,)))

    @cute.kernel
    def kernel(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
               mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
               mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        k_lane = lane % self.tpr
        grp = lane // self.tpr
        hdim = self.h * D
        n_tiles = mQKV.shape[0] * self.h
        # conv_state [B, C, 3] and conv_weight [C, 4] as rows of C * taps contiguous values
        mCSf = cute.make_tensor(mCS.iterator, cute.make_layout((mCS.shape[0], 3 * hdim * CONV_T),
                                                               stride=(3 * hdim * CONV_T, 1)))
        mCWf = cute.make_tensor(mCW.iterator, cute.make_layout((3 * hdim * (CONV_T + 1),)))

        smem = cutlass.memory.SmemAllocator()
        sS = smem.allocate_tensor(self.sdt, cute.make_layout((self.stages, D, D), stride=(D * D, D, 1)), byte_alignment=128)
        sSmall = smem.allocate_tensor(BFloat16, cute.make_layout((self.stages, 8 * (P_SMALL_VECS - P_V_DT)),
                                                                 stride=(8 * (P_SMALL_VECS - P_V_DT), 1)), byte_alignment=16)
        sDt = smem.allocate_tensor(Float32, cute.make_layout((self.stages, D), stride=(D, 1)), byte_alignment=16)
        ybuf = smem.allocate_tensor(Float32, cute.make_layout((3 * D,)), byte_alignment=16)
        dec = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)
        red = smem.allocate_tensor(Float32, cute.make_layout((self.warps,)), byte_alignment=16)
        g2s_bf = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), BFloat16, num_bits_per_copy=128)
        g2s_f32 = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), Float32, num_bits_per_copy=128)
        g2s_state = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(cache_mode=cute.nvgpu.cpasync.LoadCacheMode.GLOBAL),
                                        self.sdt, num_bits_per_copy=128)
        sScal = smem.allocate_tensor(BFloat16, cute.make_layout((self.stages, 8), stride=(8, 1)), byte_alignment=16)
        sA = smem.allocate_tensor(Float32, cute.make_layout((self.stages, 4), stride=(4, 1)), byte_alignment=16)
        obuf = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)   # gated o of each row
        g2s_b32 = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), BFloat16, num_bits_per_copy=32)
        g2s_a32 = cute.make_copy_atom(cute.nvgpu.cpasync.CopyG2SOp(), Float32, num_bits_per_copy=32)
        # offsets of the small inputs inside a stage of sSmall (bf16 elements)
        o_cs = 8 * P_V_QKV
        o_cw = o_cs + 8 * P_V_CS
        o_f = o_cw + 8 * P_V_CW
        o_g = o_f + 8 * P_V_F

        # the norm weight of this thread's rows, once
        wn = [Float32(0.0) for _ in range(self.rpt)]
        for j in cutlass.range_constexpr(self.rpt):
            wn[j] = mWn[j * self.rows_per_pass + warp * self.rg + grp].to(Float32)

        # ---- fill the pipeline: tiles 0 .. STAGES-2 of this CTA -------------------------------------
        for p in cutlass.range_constexpr(self.stages - 1):
            t = cta + p * self.ctas
            if t < n_tiles:
                self.prefetch(t, Int32(p), tidx, mQKV, mCSf, mCWf, mF, mG, mDt, mS, sS, sSmall, sDt,
                              g2s_bf, g2s_f32, g2s_state, mB, mA, sScal, sA, g2s_b32, g2s_a32)
            cute.arch.cp_async_commit_group()
            if t < n_tiles:
                self.prefetch_state(t, Int32(p), tidx, mS, sS, g2s_state)
            cute.arch.cp_async_commit_group()

        vl = cute.make_layout((self.kpl,), stride=(1,))
        n_mine = (n_tiles - cta + self.ctas - 1) // self.ctas
        for it in cutlass.range(n_mine, unroll=1):
            t = cta + it * self.ctas
            bi = t // self.h
            hd = t - bi * self.h
            stg = it % self.stages
            # tile it + STAGES - 1 goes to the stage tile it - 1 used (every thread left it: the RMSNorm barrier)
            tn = t + (self.stages - 1) * self.ctas
            if tn < n_tiles:
                self.prefetch(tn, (it + self.stages - 1) % self.stages, tidx, mQKV, mCSf, mCWf, mF, mG, mDt, mS, sS,
                              sSmall, sDt, g2s_bf, g2s_f32, g2s_state, mB, mA, sScal, sA, g2s_b32, g2s_a32)
            cute.arch.cp_async_commit_group()
            if tn < n_tiles:
                self.prefetch_state(tn, (it + self.stages - 1) % self.stages, tidx, mS, sS, g2s_state)
            cute.arch.cp_async_commit_group()
            cute.arch.cp_async_wait_group(2 * self.stages - 1)   # this thread's small inputs of tile it landed (two groups a tile)
            cute.arch.barrier()                               # ... and every thread's
            beta = sigmoid_fast(sScal[stg, hd % 2].to(Float32))  # b and A_log came with the stage (cp.async)
            rate = cute.math.exp2(sA[stg, 0] * LOG2E, fastmath=True)

            # ---- conv + SiLU of the 384 channels; conv_state shifted in place; decays -------------
            for sit in cutlass.range_constexpr(self.nslot_iters):
                i = sit * self.threads + tidx
                if i < 3 * D:
                    seg = i // D
                    ch = i - seg * D
                    gc = seg * hdim + hd * D + ch
                    c0 = sSmall[stg, o_cs + i * 3]
                    c1 = sSmall[stg, o_cs + i * 3 + 1]
                    c2 = sSmall[stg, o_cs + i * 3 + 2]
                    x = sSmall[stg, i]
                    acc = c0.to(Float32) * sSmall[stg, o_cw + i * 4].to(Float32)
                    acc = acc + c1.to(Float32) * sSmall[stg, o_cw + i * 4 + 1].to(Float32)
                    acc = acc + c2.to(Float32) * sSmall[stg, o_cw + i * 4 + 2].to(Float32)
                    acc = acc + x.to(Float32) * sSmall[stg, o_cw + i * 4 + 3].to(Float32)
                    ybuf[i] = acc * sigmoid_fast(acc)
                    mCS[bi, gc, 0] = c1
                    mCS[bi, gc, 1] = c2
                    mCS[bi, gc, 2] = x
                    if seg == 1:
                        a = rate * (sSmall[stg, o_f + ch].to(Float32) + sDt[stg, ch])
                        dec[ch] = cute.math.exp2(GATE_LOWER * sigmoid_fast(a) * LOG2E, fastmath=True)
            gate = [Float32(0.0) for _ in range(self.rpt)]
            for j in cutlass.range_constexpr(self.rpt):
                gate[j] = wn[j] * sigmoid_fast(sSmall[stg, o_g + j * self.rows_per_pass + warp * self.rg + grp].to(Float32))
            cute.arch.cp_async_wait_group(2 * self.stages - 2)   # ... and now its state (the barrier: every thread's)
            cute.arch.barrier()

            # ---- L2 norms: every warp re-reduces the 128 q and 128 k values (lane: 4 channels) -----
            sq = Float32(0.0)
            sk = Float32(0.0)
            for c in cutlass.range_constexpr(4):
                yq = ybuf[lane * 4 + c]
                yk = ybuf[D + lane * 4 + c]
                sq = sq + yq * yq
                sk = sk + yk * yk
            for off in cutlass.range_constexpr(5):
                sq = sq + cute.arch.shuffle_sync_bfly(sq, offset=16 >> off)
                sk = sk + cute.arch.shuffle_sync_bfly(sk, offset=16 >> off)
            rq = cute.math.rsqrt(sq + L2_EPS, fastmath=True) * Q_SCALE
            rk = cute.math.rsqrt(sk + L2_EPS, fastmath=True)
            fq = cute.make_rmem_tensor(vl, Float32)
            fk = cute.make_rmem_tensor(vl, Float32)
            fd = cute.make_rmem_tensor(vl, Float32)
            for c in cutlass.range_constexpr(self.kpl):
                fq[c] = ybuf[k_lane * self.kpl + c] * rq
                fk[c] = ybuf[D + k_lane * self.kpl + c] * rk
                fd[c] = dec[k_lane * self.kpl + c]
            qv = fq.load()
            kv = fk.load()
            dv = fd.load()

            # ---- delta rule per row (state row from shared memory), o from the fp32 S -------------
            ss = Float32(0.0)
            ov = [Float32(0.0) for _ in range(self.rpt)]
            for j in cutlass.range_constexpr(self.rpt):
                row = j * self.rows_per_pass + warp * self.rg + grp
                rs = cute.make_rmem_tensor(vl, self.sdt)
                cute.autovec_copy(cute.local_tile(sS[stg, row, None], (self.kpl,), (k_lane,)), rs)
                s = rs.load().to(Float32) * dv
                pred = self.row_sum((s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
                u = beta * (ybuf[2 * D + row].to(Float32) - pred)
                s = s + kv * u
                o = self.row_sum((s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
                rs.store(s.to(self.sdt))
                cute.autovec_copy(rs, cute.local_tile(mS[bi, hd, row, None], (self.kpl,), (k_lane,)))
                ov[j] = o
                ss = ss + o * o

            # ---- gated RMSNorm over the head's 128 rows ------------------------------------------
            ss = self.group_sum(ss)
            if lane == 0:
                red[warp] = ss
            if k_lane == 0:                                   # o * gate per row to shared memory: one store per row
                for j in cutlass.range_constexpr(self.rpt):     # below, not a per-lane branch table
                    obuf[j * self.rows_per_pass + warp * self.rg + grp] = ov[j] * gate[j]
            cute.arch.barrier()                               # also: every thread is done with stage stg
            tot = Float32(0.0)
            for w in cutlass.range_constexpr(self.warps):
                tot = tot + red[w]
            rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
            if tidx < D:                                      # obuf is rewritten only after the next tile's first barrier
                mO[bi, hd * D + tidx] = (obuf[tidx] * rstd).to(BFloat16)
        cute.arch.cp_async_wait_group(0)                      # no copy outlives the CTA (tail prefetches are empty)


def kda_fake_args(h: int, sdt: type[cutlass.Numeric]) -> tuple:
    """The launch arguments as compile-time placeholders: h local heads, batch symbolic."""
    hd, c = h * D, 3 * h * D
    m = cute.sym_int()

    def t(dt, shape):
        return cute.runtime.make_fake_compact_tensor(dt, shape, stride_order=tuple(reversed(range(len(shape)))),
                                                     assumed_align=16)

    return (t(BFloat16, (m, c)), t(BFloat16, (m, c, CONV_T)), t(BFloat16, (c, CONV_T + 1)), t(BFloat16, (m, hd)),
            t(BFloat16, (m, h)), t(BFloat16, (m, hd)), t(Float32, (h,)), t(Float32, (hd,)), t(BFloat16, (D,)),
            t(sdt, (m, h, D, D)), t(BFloat16, (m, hd)), cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True))


STATE_DTYPES = {"fp32": Float32, "bf16": BFloat16}


def compile(tp: int, options: str, **static):
    """Static key: state_dtype ("fp32" default, "bf16"); h = 96 / tp local heads; batch symbolic."""
    sdt = STATE_DTYPES[static.get("state_dtype", "fp32")]
    h = N_HEADS // tp
    return cute.compile(KdaPersist(sdt, h, STAGES, TPR, WARPS, CTAS_PER_SM), *kda_fake_args(h, sdt), options=options)


def launch(compiled, qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o) -> None:
    compiled(qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o)
