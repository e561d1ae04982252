"""kda_decode candidate: the whole decode step in one kernel, state tile in registers. UNVERIFIED on a GPU
(compiled for sm_90a / sm_103a on a CPU only; correctness and timing not yet run).

Rendered from prompts/kernels/kda_decode/fused.py.j2 with v_split=4 threads_per_row=8
warps=8 pdl=False hoist=True push=True
Per token b and local head hd (D = 128, HD = h*D, channel of segment s (q|k|v) = s*HD + hd*D + ch):
    y = silu(sum_t window[t] * w_conv[t]), window = [conv_state[:, 0..2], qkv]; conv_state <- window[1:]
    q = y_q * rsqrt(sum y_q^2 + 1e-6) * D^-0.5 ; k = y_k * rsqrt(sum y_k^2 + 1e-6) ; v = y_v
    decay = exp(-5 * sigmoid(exp(A_log[hd]) * (f + dt_bias)))  [D]  ;  beta = sigmoid(b[hd])
    S = S * decay[None, :] ; u = beta * (v - S @ k) ; S = S + outer(u, k) ; o = S @ q (fp32 S)
    o = o * rsqrt(mean(o^2) + 1e-5) * w_norm * sigmoid(g_out) ; S stored in the state dtype
Grid (V_SPLIT, h, B), cluster (V_SPLIT, 1, 1): CTA `rank` owns value rows [rank*RB, (rank+1)*RB), RB = D / V_SPLIT.
Block THREADS = WARPS*32. Lane l of warp w: k_lane = l % TPR owns key channels [k_lane*KPL, (k_lane+1)*KPL)
(KPL = D / TPR, 16-byte vectors of the state); row group g = l // TPR. Thread rows: for j < RPT,
row = rank*RB + j*ROWS_PER_PASS + w*RG + g (RG = 32 / TPR, ROWS_PER_PASS = WARPS*RG), so a pass of the
CTA reads ROWS_PER_PASS consecutive rows. The state is loaded first (its latency hides the prologue).
Prologue: slot i < 256 + RB is channel ch = i % 128 of segment i // 128 (q, k), or v row rank*RB + i - 256;
thread t computes slots t, t + THREADS, ... . conv_state: with V_SPLIT = 1 the thread that read a channel
shifts it in place; with V_SPLIT > 1 every CTA reads all q, k channels, so the shift waits for the
cluster barrier, then the CTA owning row block ch // RB shifts q, k, v channel ch (each channel once).
y goes to shared memory, barrier, every warp re-reduces sum q^2 and sum k^2 (lane owns channels 4l..4l+3, 5-step butterfly).
Row dot products: KPL-long lane partial -> xor butterfly over the TPR lanes of the row (offsets
TPR/2 .. 1), so every lane of the row holds the same sum. sum o^2: per thread over its RPT rows,
butterfly over the row groups (xor TPR .. 16), one fp32 per warp in shared memory, barrier, every thread
sums the NWARPS partials in warp order; with V_SPLIT > 1 thread 0 publishes the CTA sum, cluster
barrier, every thread sums the V_SPLIT CTA sums in rank order through DSMEM, a second cluster barrier
keeps each CTA's shared memory alive until its peers have read it.
hoist=True: every global input of the prologue (conv window, conv weights, f, dt_bias, A_log, b, g_out,
w_norm) is loaded into registers before any math, so the prologue waits on memory once (the loop that
computes each pass from its own loads waited once per pass: 4 serial round trips at B=1 under ncu,
results/h200/session10). The conv_state shift is stored from what was loaded (no second read; with
V_SPLIT > 1 kept in shared memory until the owner CTA stores it after the cluster barrier).
push=True: the CTA sums of o^2 are pushed by st.async into every peer's shared memory, completing bytes on
its mbarrier (initialised at the start, a relaxed cluster arrive / wait orders the inits before the pushes);
each CTA waits on its own mbarrier: no cluster barrier with a MEMBAR (the release arrive's ERRBAR was 10-14%
of the B=1 samples), no DSMEM loads, no exit barrier.
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
WARPS = 8
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


STATE_DTYPES = {"fp32": Float32, "bf16": BFloat16}


def compile(tp: int, options: str, **static):
    """Static key: state_dtype ("fp32" default, "bf16"); h = 96 / tp local heads; batch symbolic."""
    sdt = STATE_DTYPES[static.get("state_dtype", "fp32")]
    h = N_HEADS // tp
    hd, c = h * D, 3 * h * D
    m = cute.sym_int()

    def t(dt, shape):
        return cute.runtime.make_fake_compact_tensor(dt, shape, stride_order=tuple(reversed(range(len(shape)))),
                                                     assumed_align=16)

    args = (t(BFloat16, (m, c)), t(BFloat16, (m, c, CONV_T)), t(BFloat16, (c, CONV_T + 1)), t(BFloat16, (m, hd)),
            t(BFloat16, (m, h)), t(BFloat16, (m, hd)), t(Float32, (h,)), t(Float32, (hd,)), t(BFloat16, (D,)),
            t(sdt, (m, h, D, D)), t(BFloat16, (m, hd)), cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True))
    return cute.compile(KdaDecode(sdt, h), *args, options=options)


def launch(compiled, qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o) -> None:
    compiled(qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o)
