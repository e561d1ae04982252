"""kda_decode candidate (family `persistmix`): three kernels behind one callable (ByTiles), chosen per
state dtype (at compile time) and per call by the tile count B * h (h local heads): the `fused`
kernel in a small plan (one CTA per (token, head) x 4 value-row blocks, a cluster per head) at
B * h <= small_hi, the fused kernel in a mid plan (MID_ constants) at mid_lo < B * h <= mid_hi, and
the `persist` kernel (persistent CTAs stream the state through shared memory, stages - 1 tiles
ahead of the math) at every other tile count. UNVERIFIED on a GPU (compiled for sm_90a / sm_103a
on a CPU only; correctness and timing not yet run).

Rendered from prompts/kernels/kda_decode/persistmix.py.j2 with
small fused: v_split=4 threads_per_row=8 warps=4 pdl=False push=True (RMSNorm partials by st.async + mbarrier, no cluster barrier)
both fused plans: hoist=True (every prologue input loaded before any math: one memory round trip; see fused.py.j2)
fp32 small fused (F32_ constants): threads_per_row=32 warps=8 (the same v_split; bf16 keeps the shape above)
fp32 tiny fused (T32_ constants): v_split=8 at the same shape as the fp32 small plan, at B * h <= 12 (fp32 only)
mid fused: v_split=2 threads_per_row=16 warps=8
fp32: small_hi=96 mid_lo=48 mid_hi=48 persist stages=3 tpr=32 warps=16 ctas_per_sm=1
bf16: small_hi=48 mid_lo=48 mid_hi=384 persist stages=2 tpr=16 warps=8 ctas_per_sm=2
Why: on the H200 (results/h200/session9) no one kernel is fastest at every tile count. A fused plan
that splits each head over a cluster of CTAs (v_split 4) is fastest at the fewest tiles, the fused
one-CTA-per-head plan at some middle counts in bf16, and the persistent kernel (its best shape
differs by state dtype) everywhere else. The window is in tiles, not B: TP16 at 2B has the tiles
of TP8 at B and measured alike. Every plan computes the fused family's math in its per-row order.
Per token b and local head hd (D = 128, HD = h*D, channel of segment s (q|k|v) = s*HD + hd*D + ch):
    y = silu(sum_t window[t] * w_conv[t]), window = [conv_state[:, 0..2], qkv]; conv_state <- window[1:]
    q = y_q * rsqrt(sum y_q^2 + 1e-6) * D^-0.5 ; k = y_k * rsqrt(sum y_k^2 + 1e-6) ; v = y_v
    decay = exp(-5 * sigmoid(exp(A_log[hd]) * (f + dt_bias)))  [D]  ;  beta = sigmoid(b[hd])
    S = S * decay[None, :] ; u = beta * (v - S @ k) ; S = S + outer(u, k) ; o = S @ q (fp32 S)
    o = o * rsqrt(mean(o^2) + 1e-5) * w_norm * sigmoid(g_out) ; S stored in the state dtype
The fused kernel's layout is documented in prompts/kernels/kda_decode/fused.py.j2, the persistent
kernel's in prompts/kernels/kda_decode/persist.py.j2.
"""
from __future__ import annotations

import math

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import dsl_user_op

D = 128                                   # head dim (K = V = 128)
N_HEADS = 96
CONV_T = 3                                # conv taps kept in the state (kernel 4)
L2_EPS = 1e-6
RMS_EPS = 1e-5
GATE_LOWER = -5.0
Q_SCALE = D ** -0.5
LOG2E = 1.4426950408889634
V_SPLIT = 4
TPR = 8               # lanes per state row
WARPS = 4
USE_PDL = False
THREADS = WARPS * 32
KPL = D // TPR                            # key channels per lane
RG = 32 // TPR                            # row groups per warp
RB = D // V_SPLIT                         # value rows per CTA
ROWS_PER_PASS = WARPS * RG
RPT = RB // ROWS_PER_PASS                 # rows per thread
NSLOT = 2 * D + RB                        # conv channels computed per CTA: all q, all k, own v
NSLOT_ITERS = (NSLOT + THREADS - 1) // THREADS
ROW_OFFS = tuple(TPR >> (i + 1) for i in range(TPR.bit_length() - 1))      # TPR/2, ..., 1
GROUP_OFFS = tuple(TPR << i for i in range(RG.bit_length() - 1))           # TPR, ..., 16
assert RPT * ROWS_PER_PASS == RB and RB * V_SPLIT == D and 32 % TPR == 0 and RPT >= 1


@cute.jit
def row_sum(x: Float32) -> Float32:
    """Sum over the TPR lanes of a row: xor offsets TPR/2, ..., 1 stay inside the row's lanes."""
    for i in cutlass.range_constexpr(len(ROW_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=ROW_OFFS[i])
    return x


@cute.jit
def group_sum(x: Float32) -> Float32:
    """Sum over the RG row groups of a warp (xor offsets TPR, ..., 16)."""
    for i in cutlass.range_constexpr(len(GROUP_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=GROUP_OFFS[i])
    return x


@dsl_user_op
def ld_cluster_f32(addr: Int32, *, loc=None, ip=None) -> Float32:
    """ld.shared::cluster.f32 at a mapa'd (32-bit shared::cluster) address: a peer CTA's shared memory."""
    v = llvm.inline_asm(Float32.mlir_type, [Int32(addr).ir_value(loc=loc, ip=ip)], "ld.shared::cluster.f32 $0, [$1];",
                        "=f,r", has_side_effects=True, loc=loc, ip=ip)
    return Float32(v)


@cute.jit
def sigmoid(x: Float32) -> Float32:
    return 1.0 / (1.0 + cute.math.exp2(-x * LOG2E, fastmath=True))


@dsl_user_op
def st_async_f32(smem_ptr, mbar_ptr, rank, val, *, loc=None, ip=None) -> None:
    """st.async an fp32 to this shared-memory address of cluster CTA `rank`, completing 4 bytes of the
    transaction on that CTA's mbarrier at mbar_ptr (mapa turns both CTA-local addresses into the peer's
    window): the receiver waits on its mbarrier, with no cluster barrier and no MEMBAR on either side."""
    llvm.inline_asm(
        None, [Int32(smem_ptr.toint()).ir_value(loc=loc, ip=ip), Int32(mbar_ptr.toint()).ir_value(loc=loc, ip=ip),
               Int32(rank).ir_value(loc=loc, ip=ip), Float32(val).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b32 pa, pb;\n\tmapa.shared::cluster.u32 pa, $0, $2;\n\tmapa.shared::cluster.u32 pb, $1, $2;\n\t"
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [pa], $3, [pb];\n\t}",
        "r,r,r,f,~{memory}", has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)


@cute.jit
def sigmoid_fast(x: Float32) -> Float32:
    """sigmoid with rcp.approx (about 1 ulp): the IEEE division's slow-path branch is a scheduling
    barrier that kept loads behind it (session 10 SASS)."""
    return cute.arch.rcp_approx(1.0 + cute.math.exp2(-x * LOG2E, fastmath=True))


class KdaDecode:
    def __init__(self, state_dtype: type[cutlass.Numeric], heads: int):
        self.sdt = state_dtype
        self.h = heads

    @cute.jit
    def __call__(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
                 mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
                 mO: cute.Tensor, stream: cuda.CUstream):
        grid = [V_SPLIT, self.h, mQKV.shape[0]]
        if const_expr(V_SPLIT > 1):
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[THREADS, 1, 1], cluster=[V_SPLIT, 1, 1], stream=stream, use_pdl=USE_PDL)
        else:
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[THREADS, 1, 1], stream=stream, use_pdl=USE_PDL)

    @cute.kernel
    def kernel(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
               mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
               mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        rank, hd, bi = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        k_lane = lane % TPR
        grp = lane // TPR
        hdim = self.h * D
        smem = cutlass.memory.SmemAllocator()
        ybuf = smem.allocate_tensor(Float32, cute.make_layout((NSLOT,)), byte_alignment=16)
        dec = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)
        red = smem.allocate_tensor(Float32, cute.make_layout((WARPS,)), byte_alignment=16)
        part = smem.allocate_tensor(Float32, cute.make_layout((4,)), byte_alignment=16)
        mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout((1,)), byte_alignment=8)   # the peers' RMSNorm partials land on it
        shf = smem.allocate_tensor(BFloat16, cute.make_layout((3, NSLOT)), byte_alignment=16)   # conv window shift, until the owner stores it
        # the CTA sums of o^2 arrive by st.async on mbar (below); every peer's mbar must be initialised
        # before anyone pushes: a relaxed cluster arrive now, its wait just before the push
        if tidx == 0:
            cute.arch.mbarrier_init(mbar.iterator, 1)
            cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()

        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_wait()

        # ---- the state tile first: RPT rows x KPL keys, 16-byte vectors -------------------------
        vl = cute.make_layout((KPL,), stride=(1,))
        rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(RPT)]
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            cute.autovec_copy(cute.local_tile(mS[bi, hd, row, None], (KPL,), (k_lane,)), rs[j])
        # ---- every other input of the step, requested before any math: one memory round trip ----------
        # (a compiled loop that computes between loads waits once per pass; here the loads of all
        # NSLOT_ITERS passes are in flight together. A slot i >= NSLOT of the last pass loads slot
        # i % NSLOT, in bounds; its values are never used.)
        gw = []
        gg = []
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            gw.append(mWn[row])
            gg.append(mG[bi, hd * D + row])
        b_raw = mB[bi, hd]
        a_raw = mA[hd]
        cs0, cs1, cs2, xs, cw0, cw1, cw2, cw3, fs, dts = [], [], [], [], [], [], [], [], [], []
        for it in cutlass.range_constexpr(NSLOT_ITERS):
            i = it * THREADS + tidx
            if const_expr((it + 1) * THREADS > NSLOT):
                i = i % NSLOT
            seg = i // D
            ch = i - seg * D + (seg // 2) * (rank * RB)
            gc = seg * hdim + hd * D + ch
            cs0.append(mCS[bi, gc, 0])
            cs1.append(mCS[bi, gc, 1])
            cs2.append(mCS[bi, gc, 2])
            xs.append(mQKV[bi, gc])
            cw0.append(mCW[gc, 0])
            cw1.append(mCW[gc, 1])
            cw2.append(mCW[gc, 2])
            cw3.append(mCW[gc, 3])
            if const_expr(it * THREADS < 2 * D and (it + 1) * THREADS > D):   # the pass holds k slots: decays
                fs.append(mF[bi, hd * D + ch])
                dts.append(mDt[hd * D + ch])
            else:
                fs.append(None)
                dts.append(None)

        # ---- output gate of this thread's rows, beta, decays; conv + SiLU from the registers --------
        gate = [Float32(0.0) for _ in range(RPT)]
        for j in cutlass.range_constexpr(RPT):
            gate[j] = gw[j].to(Float32) * sigmoid_fast(gg[j].to(Float32))
        beta = sigmoid_fast(b_raw.to(Float32))
        rate = cute.math.exp2(a_raw * LOG2E, fastmath=True)
        for it in cutlass.range_constexpr(NSLOT_ITERS):
            i = it * THREADS + tidx
            if i < NSLOT:
                seg = i // D                                  # 0 q, 1 k, 2 v (slots >= 256 are v)
                ch = i - seg * D + (seg // 2) * (rank * RB)
                acc = cs0[it].to(Float32) * cw0[it].to(Float32)
                acc = acc + cs1[it].to(Float32) * cw1[it].to(Float32)
                acc = acc + cs2[it].to(Float32) * cw2[it].to(Float32)
                acc = acc + xs[it].to(Float32) * cw3[it].to(Float32)
                ybuf[i] = acc * sigmoid_fast(acc)
                shf[0, i] = cs1[it]                           # the owner CTA stores the shift after the cluster barrier
                shf[1, i] = cs2[it]
                shf[2, i] = xs[it]
                if const_expr(V_SPLIT == 1):                  # the thread that read the channel shifts it
                    gc = seg * hdim + hd * D + ch
                    mCS[bi, gc, 0] = cs1[it]
                    mCS[bi, gc, 1] = cs2[it]
                    mCS[bi, gc, 2] = xs[it]
                if const_expr(fs[it] is not None):
                    if seg == 1:
                        a = rate * (fs[it].to(Float32) + dts[it])
                        dec[ch] = cute.math.exp2(GATE_LOWER * sigmoid_fast(a) * LOG2E, fastmath=True)
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
        for c in cutlass.range_constexpr(KPL):
            fq[c] = ybuf[k_lane * KPL + c] * rq
            fk[c] = ybuf[D + k_lane * KPL + c] * rk
            fd[c] = dec[k_lane * KPL + c]
        qv = fq.load()
        kv = fk.load()
        dv = fd.load()

        # ---- delta rule per row, o from the fp32 S, S stored in the state dtype -----------------
        ov = [Float32(0.0) for _ in range(RPT)]
        ss = Float32(0.0)
        for j in cutlass.range_constexpr(RPT):
            lrow = j * ROWS_PER_PASS + warp * RG + grp
            s = rs[j].load().to(Float32) * dv
            pred = row_sum((s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            u = beta * (ybuf[2 * D + lrow] - pred)
            s = s + kv * u
            o = row_sum((s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            rs[j].store(s.to(self.sdt))
            cute.autovec_copy(rs[j], cute.local_tile(mS[bi, hd, rank * RB + lrow, None], (KPL,), (k_lane,)))
            ov[j] = o
            ss = ss + o * o

        # ---- gated RMSNorm: sum o^2 over the 128 rows of the head ------------------------------
        ss = group_sum(ss)
        if lane == 0:
            red[warp] = ss
        cute.arch.barrier()
        tot = Float32(0.0)
        for w in cutlass.range_constexpr(WARPS):
            tot = tot + red[w]
        if const_expr(V_SPLIT > 1):
            # thread r pushes the CTA's sum into CTA r's part[rank]; every CTA sums its part in rank order.
            # A peer's push also means it has read its conv inputs (the shift below may overwrite them).
            cute.arch.cluster_wait()                          # every peer's mbar is initialised
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, 4 * V_SPLIT)
            if tidx < V_SPLIT:
                st_async_f32(part.iterator + rank, mbar.iterator, tidx, tot)
            cute.arch.mbarrier_wait(mbar.iterator, 0)
            tot = Float32(0.0)
            for r in cutlass.range_constexpr(V_SPLIT):
                tot = tot + part[r]
        rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            if k_lane == j % TPR:                             # spread the stores over the row's lanes
                mO[bi, hd * D + row] = (ov[j] * rstd * gate[j]).to(BFloat16)
        if const_expr(V_SPLIT > 1):
            # every CTA of the cluster has read its conv inputs: the owner of row block rank shifts
            # q, k, v channels ch with ch // RB == rank from what its prologue loaded (kept in shared memory)
            for it in cutlass.range_constexpr(NSLOT_ITERS):
                i = it * THREADS + tidx
                if i < NSLOT:
                    seg = i // D
                    ch = i - seg * D + (seg // 2) * (rank * RB)
                    if ch // RB == rank:
                        gc = seg * hdim + hd * D + ch
                        mCS[bi, gc, 0] = shf[0, i]
                        mCS[bi, gc, 1] = shf[1, i]
                        mCS[bi, gc, 2] = shf[2, i]
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()


# ---- the fp32 small plan: the fused kernel at its own shape, its plan constants prefixed F32_ -------------
F32_V_SPLIT = 4
F32_TPR = 32               # lanes per state row
F32_WARPS = 8
F32_USE_PDL = False
F32_THREADS = F32_WARPS * 32
F32_KPL = D // F32_TPR                            # key channels per lane
F32_RG = 32 // F32_TPR                            # row groups per warp
F32_RB = D // F32_V_SPLIT                         # value rows per CTA
F32_ROWS_PER_PASS = F32_WARPS * F32_RG
F32_RPT = F32_RB // F32_ROWS_PER_PASS                 # rows per thread
F32_NSLOT = 2 * D + F32_RB                        # conv channels computed per CTA: all q, all k, own v
F32_NSLOT_ITERS = (F32_NSLOT + F32_THREADS - 1) // F32_THREADS
F32_ROW_OFFS = tuple(F32_TPR >> (i + 1) for i in range(F32_TPR.bit_length() - 1))      # F32_TPR/2, ..., 1
F32_GROUP_OFFS = tuple(F32_TPR << i for i in range(F32_RG.bit_length() - 1))           # F32_TPR, ..., 16
assert F32_RPT * F32_ROWS_PER_PASS == F32_RB and F32_RB * F32_V_SPLIT == D and 32 % F32_TPR == 0 and F32_RPT >= 1


@cute.jit
def F32_row_sum(x: Float32) -> Float32:
    """Sum over the F32_TPR lanes of a row: xor offsets F32_TPR/2, ..., 1 stay inside the row's lanes."""
    for i in cutlass.range_constexpr(len(F32_ROW_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=F32_ROW_OFFS[i])
    return x


@cute.jit
def F32_group_sum(x: Float32) -> Float32:
    """Sum over the F32_RG row groups of a warp (xor offsets F32_TPR, ..., 16)."""
    for i in cutlass.range_constexpr(len(F32_GROUP_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=F32_GROUP_OFFS[i])
    return x


class F32_KdaDecode:
    def __init__(self, state_dtype: type[cutlass.Numeric], heads: int):
        self.sdt = state_dtype
        self.h = heads

    @cute.jit
    def __call__(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
                 mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
                 mO: cute.Tensor, stream: cuda.CUstream):
        grid = [F32_V_SPLIT, self.h, mQKV.shape[0]]
        if const_expr(F32_V_SPLIT > 1):
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[F32_THREADS, 1, 1], cluster=[F32_V_SPLIT, 1, 1], stream=stream, use_pdl=F32_USE_PDL)
        else:
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[F32_THREADS, 1, 1], stream=stream, use_pdl=F32_USE_PDL)

    @cute.kernel
    def kernel(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
               mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
               mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        rank, hd, bi = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        k_lane = lane % F32_TPR
        grp = lane // F32_TPR
        hdim = self.h * D
        smem = cutlass.memory.SmemAllocator()
        ybuf = smem.allocate_tensor(Float32, cute.make_layout((F32_NSLOT,)), byte_alignment=16)
        dec = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)
        red = smem.allocate_tensor(Float32, cute.make_layout((F32_WARPS,)), byte_alignment=16)
        part = smem.allocate_tensor(Float32, cute.make_layout((4,)), byte_alignment=16)
        mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout((1,)), byte_alignment=8)   # the peers' RMSNorm partials land on it
        shf = smem.allocate_tensor(BFloat16, cute.make_layout((3, F32_NSLOT)), byte_alignment=16)   # conv window shift, until the owner stores it
        # the CTA sums of o^2 arrive by st.async on mbar (below); every peer's mbar must be initialised
        # before anyone pushes: a relaxed cluster arrive now, its wait just before the push
        if tidx == 0:
            cute.arch.mbarrier_init(mbar.iterator, 1)
            cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()

        if const_expr(F32_USE_PDL):
            cute.arch.griddepcontrol_wait()

        # ---- the state tile first: F32_RPT rows x F32_KPL keys, 16-byte vectors -------------------------
        vl = cute.make_layout((F32_KPL,), stride=(1,))
        rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(F32_RPT)]
        for j in cutlass.range_constexpr(F32_RPT):
            row = rank * F32_RB + j * F32_ROWS_PER_PASS + warp * F32_RG + grp
            cute.autovec_copy(cute.local_tile(mS[bi, hd, row, None], (F32_KPL,), (k_lane,)), rs[j])
        # ---- every other input of the step, requested before any math: one memory round trip ----------
        # (a compiled loop that computes between loads waits once per pass; here the loads of all
        # NSLOT_ITERS passes are in flight together. A slot i >= NSLOT of the last pass loads slot
        # i % NSLOT, in bounds; its values are never used.)
        gw = []
        gg = []
        for j in cutlass.range_constexpr(F32_RPT):
            row = rank * F32_RB + j * F32_ROWS_PER_PASS + warp * F32_RG + grp
            gw.append(mWn[row])
            gg.append(mG[bi, hd * D + row])
        b_raw = mB[bi, hd]
        a_raw = mA[hd]
        cs0, cs1, cs2, xs, cw0, cw1, cw2, cw3, fs, dts = [], [], [], [], [], [], [], [], [], []
        for it in cutlass.range_constexpr(F32_NSLOT_ITERS):
            i = it * F32_THREADS + tidx
            if const_expr((it + 1) * F32_THREADS > F32_NSLOT):
                i = i % F32_NSLOT
            seg = i // D
            ch = i - seg * D + (seg // 2) * (rank * F32_RB)
            gc = seg * hdim + hd * D + ch
            cs0.append(mCS[bi, gc, 0])
            cs1.append(mCS[bi, gc, 1])
            cs2.append(mCS[bi, gc, 2])
            xs.append(mQKV[bi, gc])
            cw0.append(mCW[gc, 0])
            cw1.append(mCW[gc, 1])
            cw2.append(mCW[gc, 2])
            cw3.append(mCW[gc, 3])
            if const_expr(it * F32_THREADS < 2 * D and (it + 1) * F32_THREADS > D):   # the pass holds k slots: decays
                fs.append(mF[bi, hd * D + ch])
                dts.append(mDt[hd * D + ch])
            else:
                fs.append(None)
                dts.append(None)

        # ---- output gate of this thread's rows, beta, decays; conv + SiLU from the registers --------
        gate = [Float32(0.0) for _ in range(F32_RPT)]
        for j in cutlass.range_constexpr(F32_RPT):
            gate[j] = gw[j].to(Float32) * sigmoid_fast(gg[j].to(Float32))
        beta = sigmoid_fast(b_raw.to(Float32))
        rate = cute.math.exp2(a_raw * LOG2E, fastmath=True)
        for it in cutlass.range_constexpr(F32_NSLOT_ITERS):
            i = it * F32_THREADS + tidx
            if i < F32_NSLOT:
                seg = i // D                                  # 0 q, 1 k, 2 v (slots >= 256 are v)
                ch = i - seg * D + (seg // 2) * (rank * F32_RB)
                acc = cs0[it].to(Float32) * cw0[it].to(Float32)
                acc = acc + cs1[it].to(Float32) * cw1[it].to(Float32)
                acc = acc + cs2[it].to(Float32) * cw2[it].to(Float32)
                acc = acc + xs[it].to(Float32) * cw3[it].to(Float32)
                ybuf[i] = acc * sigmoid_fast(acc)
                shf[0, i] = cs1[it]                           # the owner CTA stores the shift after the cluster barrier
                shf[1, i] = cs2[it]
                shf[2, i] = xs[it]
                if const_expr(F32_V_SPLIT == 1):                  # the thread that read the channel shifts it
                    gc = seg * hdim + hd * D + ch
                    mCS[bi, gc, 0] = cs1[it]
                    mCS[bi, gc, 1] = cs2[it]
                    mCS[bi, gc, 2] = xs[it]
                if const_expr(fs[it] is not None):
                    if seg == 1:
                        a = rate * (fs[it].to(Float32) + dts[it])
                        dec[ch] = cute.math.exp2(GATE_LOWER * sigmoid_fast(a) * LOG2E, fastmath=True)
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
        for c in cutlass.range_constexpr(F32_KPL):
            fq[c] = ybuf[k_lane * F32_KPL + c] * rq
            fk[c] = ybuf[D + k_lane * F32_KPL + c] * rk
            fd[c] = dec[k_lane * F32_KPL + c]
        qv = fq.load()
        kv = fk.load()
        dv = fd.load()

        # ---- delta rule per row, o from the fp32 S, S stored in the state dtype -----------------
        ov = [Float32(0.0) for _ in range(F32_RPT)]
        ss = Float32(0.0)
        for j in cutlass.range_constexpr(F32_RPT):
            lrow = j * F32_ROWS_PER_PASS + warp * F32_RG + grp
            s = rs[j].load().to(Float32) * dv
            pred = F32_row_sum((s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            u = beta * (ybuf[2 * D + lrow] - pred)
            s = s + kv * u
            o = F32_row_sum((s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            rs[j].store(s.to(self.sdt))
            cute.autovec_copy(rs[j], cute.local_tile(mS[bi, hd, rank * F32_RB + lrow, None], (F32_KPL,), (k_lane,)))
            ov[j] = o
            ss = ss + o * o

        # ---- gated RMSNorm: sum o^2 over the 128 rows of the head ------------------------------
        ss = F32_group_sum(ss)
        if lane == 0:
            red[warp] = ss
        cute.arch.barrier()
        tot = Float32(0.0)
        for w in cutlass.range_constexpr(F32_WARPS):
            tot = tot + red[w]
        if const_expr(F32_V_SPLIT > 1):
            # thread r pushes the CTA's sum into CTA r's part[rank]; every CTA sums its part in rank order.
            # A peer's push also means it has read its conv inputs (the shift below may overwrite them).
            cute.arch.cluster_wait()                          # every peer's mbar is initialised
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, 4 * F32_V_SPLIT)
            if tidx < F32_V_SPLIT:
                st_async_f32(part.iterator + rank, mbar.iterator, tidx, tot)
            cute.arch.mbarrier_wait(mbar.iterator, 0)
            tot = Float32(0.0)
            for r in cutlass.range_constexpr(F32_V_SPLIT):
                tot = tot + part[r]
        rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
        for j in cutlass.range_constexpr(F32_RPT):
            row = rank * F32_RB + j * F32_ROWS_PER_PASS + warp * F32_RG + grp
            if k_lane == j % F32_TPR:                             # spread the stores over the row's lanes
                mO[bi, hd * D + row] = (ov[j] * rstd * gate[j]).to(BFloat16)
        if const_expr(F32_V_SPLIT > 1):
            # every CTA of the cluster has read its conv inputs: the owner of row block rank shifts
            # q, k, v channels ch with ch // RB == rank from what its prologue loaded (kept in shared memory)
            for it in cutlass.range_constexpr(F32_NSLOT_ITERS):
                i = it * F32_THREADS + tidx
                if i < F32_NSLOT:
                    seg = i // D
                    ch = i - seg * D + (seg // 2) * (rank * F32_RB)
                    if ch // F32_RB == rank:
                        gc = seg * hdim + hd * D + ch
                        mCS[bi, gc, 0] = shf[0, i]
                        mCS[bi, gc, 1] = shf[1, i]
                        mCS[bi, gc, 2] = shf[2, i]
        if const_expr(F32_USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()



# ---- the fp32 tiny plan: the fused kernel over 8-CTA clusters at the fp32 small plan's shape, constants prefixed T32_
T32_V_SPLIT = 8
T32_TPR = 32               # lanes per state row
T32_WARPS = 8
T32_USE_PDL = False
T32_THREADS = T32_WARPS * 32
T32_KPL = D // T32_TPR                            # key channels per lane
T32_RG = 32 // T32_TPR                            # row groups per warp
T32_RB = D // T32_V_SPLIT                         # value rows per CTA
T32_ROWS_PER_PASS = T32_WARPS * T32_RG
T32_RPT = T32_RB // T32_ROWS_PER_PASS                 # rows per thread
T32_NSLOT = 2 * D + T32_RB                        # conv channels computed per CTA: all q, all k, own v
T32_NSLOT_ITERS = (T32_NSLOT + T32_THREADS - 1) // T32_THREADS
T32_ROW_OFFS = tuple(T32_TPR >> (i + 1) for i in range(T32_TPR.bit_length() - 1))      # T32_TPR/2, ..., 1
T32_GROUP_OFFS = tuple(T32_TPR << i for i in range(T32_RG.bit_length() - 1))           # T32_TPR, ..., 16
assert T32_RPT * T32_ROWS_PER_PASS == T32_RB and T32_RB * T32_V_SPLIT == D and 32 % T32_TPR == 0 and T32_RPT >= 1


@cute.jit
def T32_row_sum(x: Float32) -> Float32:
    """Sum over the T32_TPR lanes of a row: xor offsets T32_TPR/2, ..., 1 stay inside the row's lanes."""
    for i in cutlass.range_constexpr(len(T32_ROW_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=T32_ROW_OFFS[i])
    return x


@cute.jit
def T32_group_sum(x: Float32) -> Float32:
    """Sum over the T32_RG row groups of a warp (xor offsets T32_TPR, ..., 16)."""
    for i in cutlass.range_constexpr(len(T32_GROUP_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=T32_GROUP_OFFS[i])
    return x


class T32_KdaDecode:
    def __init__(self, state_dtype: type[cutlass.Numeric], heads: int):
        self.sdt = state_dtype
        self.h = heads

    @cute.jit
    def __call__(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
                 mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
                 mO: cute.Tensor, stream: cuda.CUstream):
        grid = [T32_V_SPLIT, self.h, mQKV.shape[0]]
        if const_expr(T32_V_SPLIT > 1):
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[T32_THREADS, 1, 1], cluster=[T32_V_SPLIT, 1, 1], stream=stream, use_pdl=T32_USE_PDL)
        else:
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[T32_THREADS, 1, 1], stream=stream, use_pdl=T32_USE_PDL)

    @cute.kernel
    def kernel(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
               mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
               mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        rank, hd, bi = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        k_lane = lane % T32_TPR
        grp = lane // T32_TPR
        hdim = self.h * D
        smem = cutlass.memory.SmemAllocator()
        ybuf = smem.allocate_tensor(Float32, cute.make_layout((T32_NSLOT,)), byte_alignment=16)
        dec = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)
        red = smem.allocate_tensor(Float32, cute.make_layout((T32_WARPS,)), byte_alignment=16)
        part = smem.allocate_tensor(Float32, cute.make_layout((8,)), byte_alignment=16)
        mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout((1,)), byte_alignment=8)   # the peers' RMSNorm partials land on it
        shf = smem.allocate_tensor(BFloat16, cute.make_layout((3, T32_NSLOT)), byte_alignment=16)   # conv window shift, until the owner stores it
        # the CTA sums of o^2 arrive by st.async on mbar (below); every peer's mbar must be initialised
        # before anyone pushes: a relaxed cluster arrive now, its wait just before the push
        if tidx == 0:
            cute.arch.mbarrier_init(mbar.iterator, 1)
            cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()

        if const_expr(T32_USE_PDL):
            cute.arch.griddepcontrol_wait()

        # ---- the state tile first: T32_RPT rows x T32_KPL keys, 16-byte vectors -------------------------
        vl = cute.make_layout((T32_KPL,), stride=(1,))
        rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(T32_RPT)]
        for j in cutlass.range_constexpr(T32_RPT):
            row = rank * T32_RB + j * T32_ROWS_PER_PASS + warp * T32_RG + grp
            cute.autovec_copy(cute.local_tile(mS[bi, hd, row, None], (T32_KPL,), (k_lane,)), rs[j])
        # ---- every other input of the step, requested before any math: one memory round trip ----------
        # (a compiled loop that computes between loads waits once per pass; here the loads of all
        # NSLOT_ITERS passes are in flight together. A slot i >= NSLOT of the last pass loads slot
        # i % NSLOT, in bounds; its values are never used.)
        gw = []
        gg = []
        for j in cutlass.range_constexpr(T32_RPT):
            row = rank * T32_RB + j * T32_ROWS_PER_PASS + warp * T32_RG + grp
            gw.append(mWn[row])
            gg.append(mG[bi, hd * D + row])
        b_raw = mB[bi, hd]
        a_raw = mA[hd]
        cs0, cs1, cs2, xs, cw0, cw1, cw2, cw3, fs, dts = [], [], [], [], [], [], [], [], [], []
        for it in cutlass.range_constexpr(T32_NSLOT_ITERS):
            i = it * T32_THREADS + tidx
            if const_expr((it + 1) * T32_THREADS > T32_NSLOT):
                i = i % T32_NSLOT
            seg = i // D
            ch = i - seg * D + (seg // 2) * (rank * T32_RB)
            gc = seg * hdim + hd * D + ch
            cs0.append(mCS[bi, gc, 0])
            cs1.append(mCS[bi, gc, 1])
            cs2.append(mCS[bi, gc, 2])
            xs.append(mQKV[bi, gc])
            cw0.append(mCW[gc, 0])
            cw1.append(mCW[gc, 1])
            cw2.append(mCW[gc, 2])
            cw3.append(mCW[gc, 3])
            if const_expr(it * T32_THREADS < 2 * D and (it + 1) * T32_THREADS > D):   # the pass holds k slots: decays
                fs.append(mF[bi, hd * D + ch])
                dts.append(mDt[hd * D + ch])
            else:
                fs.append(None)
                dts.append(None)

        # ---- output gate of this thread's rows, beta, decays; conv + SiLU from the registers --------
        gate = [Float32(0.0) for _ in range(T32_RPT)]
        for j in cutlass.range_constexpr(T32_RPT):
            gate[j] = gw[j].to(Float32) * sigmoid_fast(gg[j].to(Float32))
        beta = sigmoid_fast(b_raw.to(Float32))
        rate = cute.math.exp2(a_raw * LOG2E, fastmath=True)
        for it in cutlass.range_constexpr(T32_NSLOT_ITERS):
            i = it * T32_THREADS + tidx
            if i < T32_NSLOT:
                seg = i // D                                  # 0 q, 1 k, 2 v (slots >= 256 are v)
                ch = i - seg * D + (seg // 2) * (rank * T32_RB)
                acc = cs0[it].to(Float32) * cw0[it].to(Float32)
                acc = acc + cs1[it].to(Float32) * cw1[it].to(Float32)
                acc = acc + cs2[it].to(Float32) * cw2[it].to(Float32)
                acc = acc + xs[it].to(Float32) * cw3[it].to(Float32)
                ybuf[i] = acc * sigmoid_fast(acc)
                shf[0, i] = cs1[it]                           # the owner CTA stores the shift after the cluster barrier
                shf[1, i] = cs2[it]
                shf[2, i] = xs[it]
                if const_expr(T32_V_SPLIT == 1):                  # the thread that read the channel shifts it
                    gc = seg * hdim + hd * D + ch
                    mCS[bi, gc, 0] = cs1[it]
                    mCS[bi, gc, 1] = cs2[it]
                    mCS[bi, gc, 2] = xs[it]
                if const_expr(fs[it] is not None):
                    if seg == 1:
                        a = rate * (fs[it].to(Float32) + dts[it])
                        dec[ch] = cute.math.exp2(GATE_LOWER * sigmoid_fast(a) * LOG2E, fastmath=True)
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
        for c in cutlass.range_constexpr(T32_KPL):
            fq[c] = ybuf[k_lane * T32_KPL + c] * rq
            fk[c] = ybuf[D + k_lane * T32_KPL + c] * rk
            fd[c] = dec[k_lane * T32_KPL + c]
        qv = fq.load()
        kv = fk.load()
        dv = fd.load()

        # ---- delta rule per row, o from the fp32 S, S stored in the state dtype -----------------
        ov = [Float32(0.0) for _ in range(T32_RPT)]
        ss = Float32(0.0)
        for j in cutlass.range_constexpr(T32_RPT):
            lrow = j * T32_ROWS_PER_PASS + warp * T32_RG + grp
            s = rs[j].load().to(Float32) * dv
            pred = T32_row_sum((s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            u = beta * (ybuf[2 * D + lrow] - pred)
            s = s + kv * u
            o = T32_row_sum((s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            rs[j].store(s.to(self.sdt))
            cute.autovec_copy(rs[j], cute.local_tile(mS[bi, hd, rank * T32_RB + lrow, None], (T32_KPL,), (k_lane,)))
            ov[j] = o
            ss = ss + o * o

        # ---- gated RMSNorm: sum o^2 over the 128 rows of the head ------------------------------
        ss = T32_group_sum(ss)
        if lane == 0:
            red[warp] = ss
        cute.arch.barrier()
        tot = Float32(0.0)
        for w in cutlass.range_constexpr(T32_WARPS):
            tot = tot + red[w]
        if const_expr(T32_V_SPLIT > 1):
            # thread r pushes the CTA's sum into CTA r's part[rank]; every CTA sums its part in rank order.
            # A peer's push also means it has read its conv inputs (the shift below may overwrite them).
            cute.arch.cluster_wait()                          # every peer's mbar is initialised
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, 4 * T32_V_SPLIT)
            if tidx < T32_V_SPLIT:
                st_async_f32(part.iterator + rank, mbar.iterator, tidx, tot)
            cute.arch.mbarrier_wait(mbar.iterator, 0)
            tot = Float32(0.0)
            for r in cutlass.range_constexpr(T32_V_SPLIT):
                tot = tot + part[r]
        rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
        for j in cutlass.range_constexpr(T32_RPT):
            row = rank * T32_RB + j * T32_ROWS_PER_PASS + warp * T32_RG + grp
            if k_lane == j % T32_TPR:                             # spread the stores over the row's lanes
                mO[bi, hd * D + row] = (ov[j] * rstd * gate[j]).to(BFloat16)
        if const_expr(T32_V_SPLIT > 1):
            # every CTA of the cluster has read its conv inputs: the owner of row block rank shifts
            # q, k, v channels ch with ch // RB == rank from what its prologue loaded (kept in shared memory)
            for it in cutlass.range_constexpr(T32_NSLOT_ITERS):
                i = it * T32_THREADS + tidx
                if i < T32_NSLOT:
                    seg = i // D
                    ch = i - seg * D + (seg // 2) * (rank * T32_RB)
                    if ch // T32_RB == rank:
                        gc = seg * hdim + hd * D + ch
                        mCS[bi, gc, 0] = shf[0, i]
                        mCS[bi, gc, 1] = shf[1, i]
                        mCS[bi, gc, 2] = shf[2, i]
        if const_expr(T32_USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()



# ---- the mid plan: the fused kernel again, its plan constants prefixed MID_ -------------------------
MID_V_SPLIT = 2
MID_TPR = 16               # lanes per state row
MID_WARPS = 8
MID_USE_PDL = False
MID_THREADS = MID_WARPS * 32
MID_KPL = D // MID_TPR                            # key channels per lane
MID_RG = 32 // MID_TPR                            # row groups per warp
MID_RB = D // MID_V_SPLIT                         # value rows per CTA
MID_ROWS_PER_PASS = MID_WARPS * MID_RG
MID_RPT = MID_RB // MID_ROWS_PER_PASS                 # rows per thread
MID_NSLOT = 2 * D + MID_RB                        # conv channels computed per CTA: all q, all k, own v
MID_NSLOT_ITERS = (MID_NSLOT + MID_THREADS - 1) // MID_THREADS
MID_ROW_OFFS = tuple(MID_TPR >> (i + 1) for i in range(MID_TPR.bit_length() - 1))      # MID_TPR/2, ..., 1
MID_GROUP_OFFS = tuple(MID_TPR << i for i in range(MID_RG.bit_length() - 1))           # MID_TPR, ..., 16
assert MID_RPT * MID_ROWS_PER_PASS == MID_RB and MID_RB * MID_V_SPLIT == D and 32 % MID_TPR == 0 and MID_RPT >= 1


@cute.jit
def MID_row_sum(x: Float32) -> Float32:
    """Sum over the MID_TPR lanes of a row: xor offsets MID_TPR/2, ..., 1 stay inside the row's lanes."""
    for i in cutlass.range_constexpr(len(MID_ROW_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=MID_ROW_OFFS[i])
    return x


@cute.jit
def MID_group_sum(x: Float32) -> Float32:
    """Sum over the MID_RG row groups of a warp (xor offsets MID_TPR, ..., 16)."""
    for i in cutlass.range_constexpr(len(MID_GROUP_OFFS)):
        x = x + cute.arch.shuffle_sync_bfly(x, offset=MID_GROUP_OFFS[i])
    return x


class MID_KdaDecode:
    def __init__(self, state_dtype: type[cutlass.Numeric], heads: int):
        self.sdt = state_dtype
        self.h = heads

    @cute.jit
    def __call__(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
                 mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
                 mO: cute.Tensor, stream: cuda.CUstream):
        grid = [MID_V_SPLIT, self.h, mQKV.shape[0]]
        if const_expr(MID_V_SPLIT > 1):
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[MID_THREADS, 1, 1], cluster=[MID_V_SPLIT, 1, 1], stream=stream, use_pdl=MID_USE_PDL)
        else:
            self.kernel(mQKV, mCS, mCW, mF, mB, mG, mA, mDt, mWn, mS, mO).launch(
                grid=grid, block=[MID_THREADS, 1, 1], stream=stream, use_pdl=MID_USE_PDL)

    @cute.kernel
    def kernel(self, mQKV: cute.Tensor, mCS: cute.Tensor, mCW: cute.Tensor, mF: cute.Tensor, mB: cute.Tensor,
               mG: cute.Tensor, mA: cute.Tensor, mDt: cute.Tensor, mWn: cute.Tensor, mS: cute.Tensor,
               mO: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        rank, hd, bi = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        k_lane = lane % MID_TPR
        grp = lane // MID_TPR
        hdim = self.h * D
        smem = cutlass.memory.SmemAllocator()
        ybuf = smem.allocate_tensor(Float32, cute.make_layout((MID_NSLOT,)), byte_alignment=16)
        dec = smem.allocate_tensor(Float32, cute.make_layout((D,)), byte_alignment=16)
        red = smem.allocate_tensor(Float32, cute.make_layout((MID_WARPS,)), byte_alignment=16)
        part = smem.allocate_tensor(Float32, cute.make_layout((4,)), byte_alignment=16)
        mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout((1,)), byte_alignment=8)   # the peers' RMSNorm partials land on it
        shf = smem.allocate_tensor(BFloat16, cute.make_layout((3, MID_NSLOT)), byte_alignment=16)   # conv window shift, until the owner stores it
        # the CTA sums of o^2 arrive by st.async on mbar (below); every peer's mbar must be initialised
        # before anyone pushes: a relaxed cluster arrive now, its wait just before the push
        if tidx == 0:
            cute.arch.mbarrier_init(mbar.iterator, 1)
            cute.arch.mbarrier_init_fence()
        cute.arch.cluster_arrive_relaxed()

        if const_expr(MID_USE_PDL):
            cute.arch.griddepcontrol_wait()

        # ---- the state tile first: MID_RPT rows x MID_KPL keys, 16-byte vectors -------------------------
        vl = cute.make_layout((MID_KPL,), stride=(1,))
        rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(MID_RPT)]
        for j in cutlass.range_constexpr(MID_RPT):
            row = rank * MID_RB + j * MID_ROWS_PER_PASS + warp * MID_RG + grp
            cute.autovec_copy(cute.local_tile(mS[bi, hd, row, None], (MID_KPL,), (k_lane,)), rs[j])
        # ---- every other input of the step, requested before any math: one memory round trip ----------
        # (a compiled loop that computes between loads waits once per pass; here the loads of all
        # NSLOT_ITERS passes are in flight together. A slot i >= NSLOT of the last pass loads slot
        # i % NSLOT, in bounds; its values are never used.)
        gw = []
        gg = []
        for j in cutlass.range_constexpr(MID_RPT):
            row = rank * MID_RB + j * MID_ROWS_PER_PASS + warp * MID_RG + grp
            gw.append(mWn[row])
            gg.append(mG[bi, hd * D + row])
        b_raw = mB[bi, hd]
        a_raw = mA[hd]
        cs0, cs1, cs2, xs, cw0, cw1, cw2, cw3, fs, dts = [], [], [], [], [], [], [], [], [], []
        for it in cutlass.range_constexpr(MID_NSLOT_ITERS):
            i = it * MID_THREADS + tidx
            if const_expr((it + 1) * MID_THREADS > MID_NSLOT):
                i = i % MID_NSLOT
            seg = i // D
            ch = i - seg * D + (seg // 2) * (rank * MID_RB)
            gc = seg * hdim + hd * D + ch
            cs0.append(mCS[bi, gc, 0])
            cs1.append(mCS[bi, gc, 1])
            cs2.append(mCS[bi, gc, 2])
            xs.append(mQKV[bi, gc])
            cw0.append(mCW[gc, 0])
            cw1.append(mCW[gc, 1])
            cw2.append(mCW[gc, 2])
            cw3.append(mCW[gc, 3])
            if const_expr(it * MID_THREADS < 2 * D and (it + 1) * MID_THREADS > D):   # the pass holds k slots: decays
                fs.append(mF[bi, hd * D + ch])
                dts.append(mDt[hd * D + ch])
            else:
                fs.append(None)
                dts.append(None)

        # ---- output gate of this thread's rows, beta, decays; conv + SiLU from the registers --------
        gate = [Float32(0.0) for _ in range(MID_RPT)]
        for j in cutlass.range_constexpr(MID_RPT):
            gate[j] = gw[j].to(Float32) * sigmoid_fast(gg[j].to(Float32))
        beta = sigmoid_fast(b_raw.to(Float32))
        rate = cute.math.exp2(a_raw * LOG2E, fastmath=True)
        for it in cutlass.range_constexpr(MID_NSLOT_ITERS):
            i = it * MID_THREADS + tidx
            if i < MID_NSLOT:
                seg = i // D                                  # 0 q, 1 k, 2 v (slots >= 256 are v)
                ch = i - seg * D + (seg // 2) * (rank * MID_RB)
                acc = cs0[it].to(Float32) * cw0[it].to(Float32)
                acc = acc + cs1[it].to(Float32) * cw1[it].to(Float32)
                acc = acc + cs2[it].to(Float32) * cw2[it].to(Float32)
                acc = acc + xs[it].to(Float32) * cw3[it].to(Float32)
                ybuf[i] = acc * sigmoid_fast(acc)
                shf[0, i] = cs1[it]                           # the owner CTA stores the shift after the cluster barrier
                shf[1, i] = cs2[it]
                shf[2, i] = xs[it]
                if const_expr(MID_V_SPLIT == 1):                  # the thread that read the channel shifts it
                    gc = seg * hdim + hd * D + ch
                    mCS[bi, gc, 0] = cs1[it]
                    mCS[bi, gc, 1] = cs2[it]
                    mCS[bi, gc, 2] = xs[it]
                if const_expr(fs[it] is not None):
                    if seg == 1:
                        a = rate * (fs[it].to(Float32) + dts[it])
                        dec[ch] = cute.math.exp2(GATE_LOWER * sigmoid_fast(a) * LOG2E, fastmath=True)
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
        for c in cutlass.range_constexpr(MID_KPL):
            fq[c] = ybuf[k_lane * MID_KPL + c] * rq
            fk[c] = ybuf[D + k_lane * MID_KPL + c] * rk
            fd[c] = dec[k_lane * MID_KPL + c]
        qv = fq.load()
        kv = fk.load()
        dv = fd.load()

        # ---- delta rule per row, o from the fp32 S, S stored in the state dtype -----------------
        ov = [Float32(0.0) for _ in range(MID_RPT)]
        ss = Float32(0.0)
        for j in cutlass.range_constexpr(MID_RPT):
            lrow = j * MID_ROWS_PER_PASS + warp * MID_RG + grp
            s = rs[j].load().to(Float32) * dv
            pred = MID_row_sum((s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            u = beta * (ybuf[2 * D + lrow] - pred)
            s = s + kv * u
            o = MID_row_sum((s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0))
            rs[j].store(s.to(self.sdt))
            cute.autovec_copy(rs[j], cute.local_tile(mS[bi, hd, rank * MID_RB + lrow, None], (MID_KPL,), (k_lane,)))
            ov[j] = o
            ss = ss + o * o

        # ---- gated RMSNorm: sum o^2 over the 128 rows of the head ------------------------------
        ss = MID_group_sum(ss)
        if lane == 0:
            red[warp] = ss
        cute.arch.barrier()
        tot = Float32(0.0)
        for w in cutlass.range_constexpr(MID_WARPS):
            tot = tot + red[w]
        if const_expr(MID_V_SPLIT > 1):
            # thread r pushes the CTA's sum into CTA r's part[rank]; every CTA sums its part in rank order.
            # A peer's push also means it has read its conv inputs (the shift below may overwrite them).
            cute.arch.cluster_wait()                          # every peer's mbar is initialised
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, 4 * MID_V_SPLIT)
            if tidx < MID_V_SPLIT:
                st_async_f32(part.iterator + rank, mbar.iterator, tidx, tot)
            cute.arch.mbarrier_wait(mbar.iterator, 0)
            tot = Float32(0.0)
            for r in cutlass.range_constexpr(MID_V_SPLIT):
                tot = tot + part[r]
        rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
        for j in cutlass.range_constexpr(MID_RPT):
            row = rank * MID_RB + j * MID_ROWS_PER_PASS + warp * MID_RG + grp
            if k_lane == j % MID_TPR:                             # spread the stores over the row's lanes
                mO[bi, hd * D + row] = (ov[j] * rstd * gate[j]).to(BFloat16)
        if const_expr(MID_V_SPLIT > 1):
            # every CTA of the cluster has read its conv inputs: the owner of row block rank shifts
            # q, k, v channels ch with ch // RB == rank from what its prologue loaded (kept in shared memory)
            for it in cutlass.range_constexpr(MID_NSLOT_ITERS):
                i = it * MID_THREADS + tidx
                if i < MID_NSLOT:
                    seg = i // D
                    ch = i - seg * D + (seg // 2) * (rank * MID_RB)
                    if ch // MID_RB == rank:
                        gc = seg * hdim + hd * D + ch
                        mCS[bi, gc, 0] = shf[0, i]
                        mCS[bi, gc, 1] = shf[1, i]
                        mCS[bi, gc, 2] = shf[2, i]
        if const_expr(MID_USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()



P_SMS = 132                               # the H200's SMs: the grid is P_SMS x CTAs per SM
P_SMEM_PER_SM = 227 * 1024                # usable shared memory per SM (H200), 1 KiB of it reserved per CTA
# 16-byte vectors staged per tile besides the state: qkv (3 x 128 bf16), conv_state (3 x 128 x 3 bf16),
# conv_weight (3 x 128 x 4 bf16), f and g_out (128 bf16 each), dt_bias (128 fp32)
P_V_QKV, P_V_CS, P_V_CW, P_V_F, P_V_G, P_V_DT = 48, 144, 192, 16, 16, 32
P_SMALL_VECS = P_V_QKV + P_V_CS + P_V_CW + P_V_F + P_V_G + P_V_DT
P_ILP_ROWS = {32: 4, 16: 2}   # rows per group of the delta rule, by state width in bits (fp32_ilp, bf16_ilp)


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
        self.ilp = min(P_ILP_ROWS[state_dtype.width], self.rpt)     # rows interleaved per group in the delta rule
        assert self.rpt % self.ilp == 0

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
        for it in cutlass.range_constexpr(D * D // self.svec // self.threads):
            i = it * self.threads + tidx
            row = i // (D // self.svec)
            cv = i - row * (D // self.svec)
            cute.copy(g2s_state, cute.local_tile(mS[bi, hd, row, None], (self.svec,), (cv,)),
                      cute.local_tile(sS[stg, row, None], (self.svec,), (cv,)))
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
            cute.arch.cp_async_wait_group(self.stages - 1)       # this thread's copies of tile it landed
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

            # ---- delta rule phase by phase over groups of self.ilp rows (fp32_ilp / bf16_ilp): each butterfly
            # step issues every row's shuffle of the group before the next step, so their sums are in flight
            # together (group 1: one row's dependent chain after another's, the order of the loop below)
            ss = Float32(0.0)
            ov = [Float32(0.0) for _ in range(self.rpt)]
            for gi in cutlass.range_constexpr(self.rpt // self.ilp):
                rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(self.ilp)]
                sv = []
                for jj in cutlass.range_constexpr(self.ilp):
                    row = (gi * self.ilp + jj) * self.rows_per_pass + warp * self.rg + grp
                    cute.autovec_copy(cute.local_tile(sS[stg, row, None], (self.kpl,), (k_lane,)), rs[jj])
                    s = rs[jj].load().to(Float32) * dv
                    sv.append(s)
                    ov[gi * self.ilp + jj] = (s * kv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
                for i in cutlass.range_constexpr(len(self.row_offs)):
                    for jj in cutlass.range_constexpr(self.ilp):
                        j = gi * self.ilp + jj
                        ov[j] = ov[j] + cute.arch.shuffle_sync_bfly(ov[j], offset=self.row_offs[i])
                for jj in cutlass.range_constexpr(self.ilp):
                    j = gi * self.ilp + jj
                    row = j * self.rows_per_pass + warp * self.rg + grp
                    u = beta * (ybuf[2 * D + row].to(Float32) - ov[j])  # ov[j] holds row j's prediction S k here
                    s = sv[jj] + kv * u
                    ov[j] = (s * qv).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
                    rs[jj].store(s.to(self.sdt))
                    cute.autovec_copy(rs[jj], cute.local_tile(mS[bi, hd, row, None], (self.kpl,), (k_lane,)))
                for i in cutlass.range_constexpr(len(self.row_offs)):
                    for jj in cutlass.range_constexpr(self.ilp):
                        j = gi * self.ilp + jj
                        ov[j] = ov[j] + cute.arch.shuffle_sync_bfly(ov[j], offset=self.row_offs[i])
                for jj in cutlass.range_constexpr(self.ilp):
                    ss = ss + ov[gi * self.ilp + jj] * ov[gi * self.ilp + jj]

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



class Plan:
    """One state dtype's plan: the small fused kernel where B * h <= small_hi, the mid fused kernel
    where mid_lo < B * h <= mid_hi, else the persistent kernel with this shape."""

    def __init__(self, small_hi: int, mid_lo: int, mid_hi: int, stages: int, tpr: int, warps: int, ctas_per_sm: int,
                 tiny_hi: int = 0):
        self.small_hi, self.mid_lo, self.mid_hi = small_hi, mid_lo, mid_hi
        self.stages, self.tpr, self.warps, self.ctas_per_sm = stages, tpr, warps, ctas_per_sm
        self.tiny_hi = tiny_hi                                  # B * h <= tiny_hi: the tiny plan (v_split 8)


PLANS = {"fp32": Plan(96, 48, 48, 3, 32, 16, 1, tiny_hi=12),
         "bf16": Plan(48, 48, 384, 2, 16, 8, 2)}
STATE_DTYPES = {"fp32": Float32, "bf16": BFloat16}


class ByTiles:
    """The compiled kernels behind one callable, chosen on the host from qkv.shape[0] * h (a CUDA
    graph captures one of them)."""

    def __init__(self, plan: Plan, heads: int, small, mid, large, tiny=None):
        self.plan = plan
        self.h = heads
        self.kernels = {"small": small, "mid": mid, "persist": large, "tiny": tiny}

    def which(self, batch: int) -> str:
        tiles = batch * self.h
        if tiles <= self.plan.tiny_hi:
            return "tiny"
        if tiles <= self.plan.small_hi:
            return "small"
        if self.plan.mid_lo < tiles <= self.plan.mid_hi:
            return "mid"
        return "persist"

    def __call__(self, qkv, *rest) -> None:
        self.kernels[self.which(qkv.shape[0])](qkv, *rest)


def compile(tp: int, options: str, **static):
    """Static key: state_dtype ("fp32" default, "bf16"); h = 96 / tp local heads; batch symbolic.
    A plan whose window is empty is not compiled."""
    name = static.get("state_dtype", "fp32")
    sdt, plan = STATE_DTYPES[name], PLANS[name]
    h = N_HEADS // tp
    args = kda_fake_args(h, sdt)
    large = cute.compile(KdaPersist(sdt, h, plan.stages, plan.tpr, plan.warps, plan.ctas_per_sm), *args, options=options)
    small_kernel = F32_KdaDecode if name == "fp32" else KdaDecode
    small = cute.compile(small_kernel(sdt, h), *args, options=options) if plan.small_hi > 0 else None
    mid = cute.compile(MID_KdaDecode(sdt, h), *args, options=options) if plan.mid_hi > plan.mid_lo else None
    tiny = cute.compile(T32_KdaDecode(sdt, h), *args, options=options) if plan.tiny_hi > 0 else None
    return ByTiles(plan, h, small, mid, large, tiny)


def launch(compiled, qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o) -> None:
    compiled(qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o)
