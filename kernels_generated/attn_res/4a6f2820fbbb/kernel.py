"""attn_res candidate: one CTA per row, two passes over the sources (the second from cache). Verified on the
H200 at NB = 8 with compact blocks in session 2 (correct at every point, 5.9-7.9 us: results/h200/session2/);
this build (NB = 1..8 from the static key shape="nb1".."nb8", `blocks` at a dynamic batch stride) compiled
for sm_90a / sm_103a on a CPU only, not yet run on a GPU.

Rendered from prompts/kernels/attn_res/rowmix.py.j2 with threads=896 vec=8 pdl=False
NB (sealed blocks, 1..8) is a compile-time parameter from the static key shape="nb<NB>" ("" = nb8).
`blocks` [B, NB, H] may be a view of a [B, 8, H] buffer: its batch stride is dynamic (a multiple of
8 bf16 = 16 bytes, so the 16-byte loads stay legal), its block and element strides are H and 1.
    new_prefix = bf16(prefix + delta);  V = [blocks_0 .. blocks_{NB-1}, new_prefix]   (NS = NB + 1)
    logit_j = rms(V_j) . w_res = rsqrt(mean(V_j^2) + eps) * (V_j . w_res)    (rstd_j factors out)
    p = softmax(logit);  mixed = sum_j p_j V_j (fp32);  out = bf16(mixed * rsqrt(mean(mixed^2) + eps) * w_norm)
Grid (B,), block THREADS. Thread t owns the VEC-wide vectors k*THREADS + t, k < NV, of every
source (coalesced 16-byte loads for VEC=8). Pass 1 reads every source once from HBM; pass 2 (the
mix, after the softmax) re-reads the blocks, which this CTA just touched (L1 / L2 hits), and keeps
new_prefix in registers, rounded to bf16 before any use, as the reference does.
Reductions: per source, the thread partials (sum V_j^2, V_j . w_res) -> 5-step warp butterflies ->
shared [NWARPS, 2*NS] -> barrier -> in every warp, lane j < NS sums column j over the warps and
forms logit_j; the softmax runs across lanes (max and sum butterflies, exp2), and p_j reaches
every lane by shfl.idx from lane j, so no second barrier is needed for p. The mix's sum of
squares takes one more warp butterfly + shared [NWARPS] + barrier.
"""
from __future__ import annotations

import math
import operator

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, const_expr

HIDDEN = 7168
MAX_BLOCKS = 8                            # the K3 maximum (blocks[0] = the embedding)
EPS = 1e-5
LOG2E = 1.4426950408889634
THREADS = 896
VEC = 8                           # bf16 per access (16 bytes)
USE_PDL = False
NV = HIDDEN // (THREADS * VEC)            # vectors per thread per source
NWARPS = THREADS // 32
assert NV * THREADS * VEC == HIDDEN and THREADS % 32 == 0 and MAX_BLOCKS + 1 <= 32


def num_blocks(shape: str) -> int:
    """NB of the static key "nb1" .. "nb8" ("" = nb8); ValueError on anything else."""
    name = shape or f"nb{MAX_BLOCKS}"
    known = [f"nb{n}" for n in range(1, MAX_BLOCKS + 1)]
    if name not in known:
        raise ValueError(f"unknown attn_res shape '{shape}' (known: {', '.join(known)})")
    return int(name[2:])


class AttnRes:
    def __init__(self, nb: int):
        self.nb = nb                      # blocks mixed (compile-time)
        self.ns = nb + 1                  # sources: the blocks + new_prefix (lane j < ns holds logit_j)

    @cute.jit
    def __call__(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
                 mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor, stream: cuda.CUstream):
        self.kernel(mP, mD, mB, mWr, mWn, mOut, mNP).launch(grid=[mP.shape[0], 1, 1], block=[THREADS, 1, 1],
                                                            stream=stream, use_pdl=USE_PDL)

    @cute.kernel
    def kernel(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
               mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor):
        NB, NS = self.nb, self.ns         # Python ints at trace time: loops unroll, arrays are static
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout((NWARPS, 2 * NS), stride=(2 * NS, 1)),
                                   byte_alignment=16)
        red2 = smem.allocate_tensor(Float32, cute.make_layout((NWARPS,)), byte_alignment=16)

        vl = cute.make_layout((VEC,), stride=(1,))
        src = [[cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)] for _ in range(NS)]
        rd = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwr = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwn = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        mixf = [cute.make_rmem_tensor(vl, Float32) for _ in range(NV)]
        gp, gd, gnp, go = mP[row, None], mD[row, None], mNP[row, None], mOut[row, None]

        # weights do not depend on the previous kernel: load them before the PDL wait
        for k in cutlass.range_constexpr(NV):
            cute.autovec_copy(cute.local_tile(mWr, (VEC,), (k * THREADS + tidx,)), rwr[k])
            cute.autovec_copy(cute.local_tile(mWn, (VEC,), (k * THREADS + tidx,)), rwn[k])
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_wait()
        for k in cutlass.range_constexpr(NV):
            cute.autovec_copy(cute.local_tile(gp, (VEC,), (k * THREADS + tidx,)), src[NB][k])
            cute.autovec_copy(cute.local_tile(gd, (VEC,), (k * THREADS + tidx,)), rd[k])
        for j in cutlass.range_constexpr(NB):
            for k in cutlass.range_constexpr(NV):
                cute.autovec_copy(cute.local_tile(mB[row, j, None], (VEC,), (k * THREADS + tidx,)), src[j][k])

        # new_prefix = bf16(prefix + delta): rounded once, stored, and mixed as the rounded value
        for k in cutlass.range_constexpr(NV):
            src[NB][k].store((src[NB][k].load().to(Float32) + rd[k].load().to(Float32)).to(BFloat16))
            cute.autovec_copy(src[NB][k], cute.local_tile(gnp, (VEC,), (k * THREADS + tidx,)))

        # per source j: ss_j = sum V_j^2 and dt_j = V_j . w_res, reduced over the warp at once
        # (j outer keeps two partials live instead of 2*NS)
        for j in cutlass.range_constexpr(NS):
            ssp = Float32(0.0)
            dtp = Float32(0.0)
            for k in cutlass.range_constexpr(NV):
                v = src[j][k].load().to(Float32)
                ssp += (v * v).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
                dtp += (v * rwr[k].load().to(Float32)).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0),
                                                               reduction_profile=0)
            ssp = cute.arch.warp_reduction(ssp, operator.add)          # 5 x shfl.bfly, all 32 lanes
            dtp = cute.arch.warp_reduction(dtp, operator.add)
            if lane == 0:
                red[warp, j] = ssp
                red[warp, NS + j] = dtp
        cute.arch.barrier()

        # lane j < NS of every warp: logit_j from the column sums; lanes >= NS carry -inf
        ssj = Float32(0.0)
        dtj = Float32(0.0)
        logit = Float32(-math.inf)
        if lane < NS:
            for w in cutlass.range_constexpr(NWARPS):
                ssj += red[w, lane]
                dtj += red[w, NS + lane]
            logit = dtj * cute.math.rsqrt(ssj * (1.0 / HIDDEN) + EPS, fastmath=True)
        mx = cute.arch.warp_reduction(logit, cute.arch.fmax)
        e = cute.math.exp2((logit - mx) * LOG2E, fastmath=True)      # exp2(-inf) = 0 for lanes >= NS
        den = cute.arch.warp_reduction(e, operator.add)
        pl = e / den
        p = [cute.arch.shuffle_sync(pl, j) for j in range(NS)]         # shfl.idx from lane j

        ss2 = Float32(0.0)
        for k in cutlass.range_constexpr(NV):
            # the blocks again, after the barrier: L1 / L2 hits (this CTA read them microseconds ago);
            # holding them in registers across the softmax spills (the fp32 conversions stay live)
            for j in cutlass.range_constexpr(NB):
                cute.autovec_copy(cute.local_tile(mB[row, j, None], (VEC,), (k * THREADS + tidx,)), src[j][k])
            m = src[NB][k].load().to(Float32) * p[NB]
            for j in cutlass.range_constexpr(NB):
                m = m + src[j][k].load().to(Float32) * p[j]
            mixf[k].store(m)
            ss2 += (m * m).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
        ss2 = cute.arch.warp_reduction(ss2, operator.add)
        if lane == 0:
            red2[warp] = ss2
        cute.arch.barrier()
        tot = Float32(0.0)
        if lane < NWARPS:
            tot = red2[lane]
        tot = cute.arch.warp_reduction(tot, operator.add)
        rstd = cute.math.rsqrt(tot * (1.0 / HIDDEN) + EPS, fastmath=True)

        for k in cutlass.range_constexpr(NV):
            y = mixf[k].load() * rstd * rwn[k].load().to(Float32)
            rd[k].store(y.to(BFloat16))
            cute.autovec_copy(rd[k], cute.local_tile(go, (VEC,), (k * THREADS + tidx,)))
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()


def compile(tp: int, options: str, shape: str = "nb8", **static):
    """H = 7168 is replicated: the kernel is the same at every TP; NB comes from `shape`."""
    nb = num_blocks(shape)
    m = cute.sym_int()
    act = lambda: cute.runtime.make_fake_compact_tensor(BFloat16, (m, HIDDEN), stride_order=(1, 0), assumed_align=16)
    # batch stride dynamic (the decoder's view of its [B, 8, H] buffer has 8*H whatever NB is);
    # divisibility 8 bf16 = 16 bytes keeps every row start 16-byte aligned for the vector loads
    blocks = cute.runtime.make_fake_tensor(BFloat16, (m, nb, HIDDEN), stride=(cute.sym_int64(divisibility=8), HIDDEN, 1),
                                           assumed_align=16)
    w = lambda: cute.runtime.make_fake_compact_tensor(BFloat16, (HIDDEN,), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(AttnRes(nb), act(), act(), blocks, w(), w(), act(), act(), stream, options=options)


def launch(compiled, prefix, delta, blocks, w_res, w_norm, out, new_prefix) -> None:
    compiled(prefix, delta, blocks, w_res, w_norm, out, new_prefix)
