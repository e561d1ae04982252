"""kda_decode candidate (family `staged`): the whole decode step in one kernel, state tile in registers,
every input fetched in one round trip with 16-byte vectors. UNVERIFIED on a GPU (compiled for sm_90a /
sm_103a on a CPU only; correctness and timing not yet run).

Rendered from prompts/kernels/kda_decode/staged.py.j2 with v_split=1 threads_per_row=16
warps=8 pdl=False
Math as in the `fused` family (per token b and local head hd, D = 128, HD = h*D):
    y = silu(sum_t window[t] * w_conv[t]), window = [conv_state[:, 0..2], qkv]; conv_state <- window[1:]
    q = y_q * rsqrt(sum y_q^2 + 1e-6) * D^-0.5 ; k = y_k * rsqrt(sum y_k^2 + 1e-6) ; v = y_v
    decay = exp(-5 * sigmoid(exp(A_log[hd]) * (f + dt_bias)))  [D]  ;  beta = sigmoid(b[hd])
    S = S * decay[None, :] ; u = beta * (v - S @ k) ; S = S + outer(u, k) ; o = S @ q (fp32 S)
    o = o * rsqrt(mean(o^2) + 1e-5) * w_norm * sigmoid(g_out) ; S stored in the state dtype
What differs from `fused` (same grid, cluster, row / lane map and reduction orders):
- Conv in 8-channel groups: group i < NG = 32 + RB/8 is q channels 8i.. (i < 16), k channels 8(i-16)..
  (i < 32) or this CTA's v rows rank*RB + 8(i-32)..; thread i owns group i (THREADS >= NG, one pass).
  Its inputs are 16-byte vectors: qkv 8 x bf16 (1 vector), conv_state 8 x 3 bf16 (48 contiguous bytes,
  3 vectors: conv_state is passed flat [B, 3C]), conv_weight 8 x 4 bf16 (64 bytes, 4 vectors: passed
  flat [4C]), f 8 x bf16 and dt_bias 8 x fp32 for the k groups.
- One round trip: the conv inputs are requested first (loads into registers, no math), then the whole
  state tile, then the row gates; the math waits on them only afterwards.
- The conv_state shift is stored from the registers that were loaded: with V_SPLIT = 1 at once; with
  V_SPLIT > 1 the v groups at once (only this CTA reads them) and the q, k groups by their owner CTA
  (channel block 8(i%16) // RB == rank) after the cluster barrier that follows every CTA's prologue,
  without a second read of conv_state.
- PDL: the weights (conv_weight, dt_bias, A_log, w_norm: never written by a kernel) are read before
  griddepcontrol.wait; dependents are released right after it (their own wait still orders them after
  this grid's completion and memory flush).
Grid (V_SPLIT, h, B), cluster (V_SPLIT, 1, 1): CTA `rank` owns value rows [rank*RB, (rank+1)*RB), RB = D / V_SPLIT.
Lane l of warp w: k_lane = l % TPR owns key channels [k_lane*KPL, (k_lane+1)*KPL), row group g = l // TPR;
thread rows: row = rank*RB + j*ROWS_PER_PASS + w*RG + g for j < RPT.
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
CG = 8                                    # conv channels per thread: 8 bf16 = one 16-byte vector
L2_EPS = 1e-6
RMS_EPS = 1e-5
GATE_LOWER = -5.0
Q_SCALE = D ** -0.5
LOG2E = 1.4426950408889634
V_SPLIT = 1
TPR = 16               # lanes per state row
WARPS = 8
USE_PDL = False
THREADS = WARPS * 32
KPL = D // TPR                            # key channels per lane
RG = 32 // TPR                            # row groups per warp
RB = D // V_SPLIT                         # value rows per CTA
ROWS_PER_PASS = WARPS * RG
RPT = RB // ROWS_PER_PASS                 # rows per thread
NSLOT = 2 * D + RB                        # conv channels computed per CTA: all q, all k, own v
NG = NSLOT // CG                          # conv groups per CTA
ROW_OFFS = tuple(TPR >> (i + 1) for i in range(TPR.bit_length() - 1))      # TPR/2, ..., 1
GROUP_OFFS = tuple(TPR << i for i in range(RG.bit_length() - 1))           # TPR, ..., 16
assert RPT * ROWS_PER_PASS == RB and RB * V_SPLIT == D and 32 % TPR == 0 and RPT >= 1
assert RB % CG == 0 and NG <= THREADS and NG <= 48


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

        # conv group of this thread (meaningful for tidx < NG): segment 0 q, 1 k, 2 v (NG <= 48)
        gi = tidx
        seg = gi // 16
        ch0 = gi * CG - seg * D + (seg // 2) * (rank * RB)
        gc = seg * hdim + hd * D + ch0                       # first global conv channel of the group
        cs_l = cute.make_layout((CONV_T * CG,), stride=(1,))
        w_l = cute.make_layout(((CONV_T + 1) * CG,), stride=(1,))
        g_l = cute.make_layout((CG,), stride=(1,))
        r_cs = cute.make_rmem_tensor(cs_l, BFloat16)         # [c][t] = conv_state[gc + c, t]
        r_w = cute.make_rmem_tensor(w_l, BFloat16)           # [c][t] = conv_weight[gc + c, t]
        r_x = cute.make_rmem_tensor(g_l, BFloat16)
        r_f = cute.make_rmem_tensor(g_l, BFloat16)
        r_dt = cute.make_rmem_tensor(g_l, Float32)
        r_nw = cute.make_rmem_tensor(cs_l, BFloat16)         # shifted conv state of the group

        # ---- weights: no kernel writes them, so they may be read before the PDL wait ----------
        rate = cute.math.exp2(mA[hd] * LOG2E, fastmath=True)
        if tidx < NG:
            cute.autovec_copy(cute.local_tile(mCW, ((CONV_T + 1) * CG,), (gc // CG,)), r_w)
            if seg == 1:
                cute.autovec_copy(cute.local_tile(mDt, (CG,), ((hd * D + ch0) // CG,)), r_dt)
        wn = [Float32(0.0) for _ in range(RPT)]
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            wn[j] = mWn[row].to(Float32)

        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        # ---- one round trip: conv inputs (registers only), then the state tile, then gates -----
        if tidx < NG:
            cute.autovec_copy(cute.local_tile(mCS[bi, None], (CONV_T * CG,), (gc // CG,)), r_cs)
            cute.autovec_copy(cute.local_tile(mQKV[bi, None], (CG,), (gc // CG,)), r_x)
            if seg == 1:
                cute.autovec_copy(cute.local_tile(mF[bi, None], (CG,), ((hd * D + ch0) // CG,)), r_f)
        vl = cute.make_layout((KPL,), stride=(1,))
        rs = [cute.make_rmem_tensor(vl, self.sdt) for _ in range(RPT)]
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            cute.autovec_copy(cute.local_tile(mS[bi, hd, row, None], (KPL,), (k_lane,)), rs[j])
        gate = [Float32(0.0) for _ in range(RPT)]
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            gate[j] = wn[j] * sigmoid(mG[bi, hd * D + row].to(Float32))
        beta = sigmoid(mB[bi, hd].to(Float32))

        # ---- conv + SiLU of the group, decays of the k groups, conv_state shift ---------------
        if tidx < NG:
            for c in cutlass.range_constexpr(CG):
                acc = r_cs[c * CONV_T].to(Float32) * r_w[c * (CONV_T + 1)].to(Float32)
                acc = acc + r_cs[c * CONV_T + 1].to(Float32) * r_w[c * (CONV_T + 1) + 1].to(Float32)
                acc = acc + r_cs[c * CONV_T + 2].to(Float32) * r_w[c * (CONV_T + 1) + 2].to(Float32)
                acc = acc + r_x[c].to(Float32) * r_w[c * (CONV_T + 1) + 3].to(Float32)
                ybuf[gi * CG + c] = acc * sigmoid(acc)
                r_nw[c * CONV_T] = r_cs[c * CONV_T + 1]
                r_nw[c * CONV_T + 1] = r_cs[c * CONV_T + 2]
                r_nw[c * CONV_T + 2] = r_x[c]
            if seg == 1:
                for c in cutlass.range_constexpr(CG):
                    a = rate * (r_f[c].to(Float32) + r_dt[c])
                    dec[ch0 + c] = cute.math.exp2(GATE_LOWER * sigmoid(a) * LOG2E, fastmath=True)
            if const_expr(V_SPLIT == 1):
                cute.autovec_copy(r_nw, cute.local_tile(mCS[bi, None], (CONV_T * CG,), (gc // CG,)))
            else:
                if seg == 2:                                  # own v rows: no other CTA reads them
                    cute.autovec_copy(r_nw, cute.local_tile(mCS[bi, None], (CONV_T * CG,), (gc // CG,)))
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
            if tidx == 0:
                part[0] = tot
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            # every CTA of the cluster is past its prologue (all conv_state reads done): the owner
            # of q / k channel block rank stores their shifted conv state from its registers
            if tidx < 32:
                if (ch0 // RB) == rank:
                    cute.autovec_copy(r_nw, cute.local_tile(mCS[bi, None], (CONV_T * CG,), (gc // CG,)))
            tot = Float32(0.0)
            for r in cutlass.range_constexpr(V_SPLIT):
                tot = tot + ld_cluster_f32(cute.arch.map_dsmem_ptr(part.iterator, r).toint())
            cute.arch.cluster_arrive()
        rstd = cute.math.rsqrt(tot * (1.0 / D) + RMS_EPS, fastmath=True)
        for j in cutlass.range_constexpr(RPT):
            row = rank * RB + j * ROWS_PER_PASS + warp * RG + grp
            if k_lane == j % TPR:                             # spread the stores over the row's lanes
                mO[bi, hd * D + row] = (ov[j] * rstd * gate[j]).to(BFloat16)
        if const_expr(V_SPLIT > 1):
            cute.arch.cluster_wait()                          # peers are done reading `part`


STATE_DTYPES = {"fp32": Float32, "bf16": BFloat16}


def compile(tp: int, options: str, **static):
    """Static key: state_dtype ("fp32" default, "bf16"); h = 96 / tp local heads; batch symbolic.
    conv_state and conv_weight are compiled flat ([B, 3C] and [4C]); `launch` passes views."""
    sdt = STATE_DTYPES[static.get("state_dtype", "fp32")]
    h = N_HEADS // tp
    hd, c = h * D, 3 * h * D
    m = cute.sym_int()

    def t(dt, shape):
        return cute.runtime.make_fake_compact_tensor(dt, shape, stride_order=tuple(reversed(range(len(shape)))),
                                                     assumed_align=16)

    args = (t(BFloat16, (m, c)), t(BFloat16, (m, c * CONV_T)), t(BFloat16, (c * (CONV_T + 1),)), t(BFloat16, (m, hd)),
            t(BFloat16, (m, h)), t(BFloat16, (m, hd)), t(Float32, (h,)), t(Float32, (hd,)), t(BFloat16, (D,)),
            t(sdt, (m, h, D, D)), t(BFloat16, (m, hd)), cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True))
    return cute.compile(KdaDecode(sdt, h), *args, options=options)


def launch(compiled, qkv, conv_state, conv_weight, f, b, g_out, A_log, dt_bias, w_norm, state, o) -> None:
    # views only (no allocation, CUDA-graph safe): the tensors are contiguous
    compiled(qkv, conv_state.view(conv_state.shape[0], -1), conv_weight.view(-1), f, b, g_out, A_log, dt_bias,
             w_norm, state, o)
