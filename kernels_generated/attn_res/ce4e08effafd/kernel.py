"""attn_res candidate: one row split over a cluster of CS CTAs, every source of the CTA's slice held in
registers (one pass over HBM), reductions made cluster-wide through distributed shared memory (DSMEM).
Compiled for sm_90a / sm_103a on a CPU; not yet run on a GPU.

Rendered from prompts/kernels/attn_res/clustermix_pf.py.j2 with cs=2 threads=448 vec=8 pdl=True
NB (sealed blocks, 1..8) is a compile-time parameter from the static key shape="nb<NB>" ("" = nb8).
`blocks` [B, NB, H] may be a view of a [B, 8, H] buffer: its batch stride is dynamic (a multiple of
8 bf16 = 16 bytes, so the 16-byte loads stay legal), its block and element strides are H and 1.
    new_prefix = bf16(prefix + delta);  V = [blocks_0 .. blocks_{NB-1}, new_prefix]   (NS = NB + 1)
    logit_j = rms(V_j) . w_res = rsqrt(mean(V_j^2) + eps) * (V_j . w_res)    (rstd_j factors out)
    p = softmax(logit);  mixed = sum_j p_j V_j (fp32);  out = bf16(mixed * rsqrt(mean(mixed^2) + eps) * w_norm)
Grid (CS, B), cluster (CS, 1, 1): row = block_idx.y, rank = block_idx.x (= the CTA's rank in its
cluster, which spans grid x). CTA `rank` owns the SV = H / (CS * VEC) VEC-wide vectors
rank*SV .. rank*SV + SV - 1 of every source; thread t owns the vectors rank*SV + k*THREADS + t,
k < NV = ceil(SV / THREADS) (coalesced 16-byte loads for VEC=8); a vector with k*THREADS + t >= SV
is not loaded (registers zeroed, so it adds 0 to every sum) nor stored. All NS sources of the slice
stay in registers from the load to the mix: each source byte crosses HBM -> SM once.
Reductions, every one in a fixed order so that all CS CTAs compute bit-identical logits, softmax
and rstd: thread partials (over its vectors k, elements in order) -> 5-step warp butterfly ->
shared [NWARPS, *] -> CTA barrier -> warp 0 sums the warps in order into the CTA partial (shared)
-> cluster barrier (arrive.release / wait.acquire) -> every CTA reads the CS CTA partials through
DSMEM (mapa + ld.shared::cluster) and sums them in rank order 0..CS-1.
Phase 1 reduces (sum V_j^2, V_j . w_res) per source; lane j < NS of every warp forms logit_j, the
softmax runs across lanes (max and sum butterflies, exp2) and p_j reaches every lane by shfl.idx.
Phase 2 reduces sum mixed^2 the same way into its own buffers (no reuse of phase 1's). A CTA arrives
on a third cluster barrier once it has read its peers' partials and waits on it after its stores:
no CTA's shared memory goes away while a peer may still read it.
PDL: the weights load before griddepcontrol.wait; dependents launch as soon as this
kernel's own wait returns (a dependent that prefetches its weights, e.g. the router, streams them
while this kernel runs; its own griddepcontrol.wait still waits for this grid to finish).
"""
from __future__ import annotations

import math
import operator

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

HIDDEN = 7168
MAX_BLOCKS = 8                            # the K3 maximum (blocks[0] = the embedding)
EPS = 1e-5
LOG2E = 1.4426950408889634
CS = 2                             # CTAs per row (one cluster; 8 = the portable cluster limit)
THREADS = 448
VEC = 8                           # bf16 per access (16 bytes)
USE_PDL = True
SV = HIDDEN // (CS * VEC)                 # vectors per CTA per source
NV = -(-SV // THREADS)                    # vectors per thread per source (the last may be idle)
EXACT = NV * THREADS == SV                # no idle vector: no predication
NWARPS = THREADS // 32
assert SV * CS * VEC == HIDDEN and THREADS % 32 == 0 and 2 <= CS <= 8 and 2 * (MAX_BLOCKS + 1) <= 32


def num_blocks(shape: str) -> int:
    """NB of the static key "nb1" .. "nb8" ("" = nb8); ValueError on anything else."""
    name = shape or f"nb{MAX_BLOCKS}"
    known = [f"nb{n}" for n in range(1, MAX_BLOCKS + 1)]
    if name not in known:
        raise ValueError(f"unknown attn_res shape '{shape}' (known: {', '.join(known)})")
    return int(name[2:])


@dsl_user_op
def ld_cluster_f32(smem_ptr, rank, *, loc=None, ip=None) -> Float32:
    """The fp32 at this shared-memory address in cluster CTA `rank`: mapa turns the CTA-local
    shared address into the peer's window of the cluster's shared space, ld.shared::cluster reads it.
    Side effects + a memory clobber keep the load after the cluster barrier that published it."""
    local = llvm.ptrtoint(T.i32(), smem_ptr.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip)
    return Float32(llvm.inline_asm(
        T.f32(), [local, Int32(rank).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b32 peer;\n\tmapa.shared::cluster.u32 peer, $1, $2;\n\tld.shared::cluster.f32 $0, [peer];\n\t}",
        "=f,r,r,~{memory}", has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip))


class AttnResCluster:
    def __init__(self, nb: int):
        self.nb = nb                      # blocks mixed (compile-time)
        self.ns = nb + 1                  # sources: the blocks + new_prefix

    @cute.jit
    def __call__(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
                 mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor, stream: cuda.CUstream):
        self.kernel(mP, mD, mB, mWr, mWn, mOut, mNP).launch(grid=[CS, mP.shape[0], 1], block=[THREADS, 1, 1],
                                                            cluster=[CS, 1, 1], stream=stream, use_pdl=USE_PDL)

    @cute.kernel
    def kernel(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
               mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor):
        NB, NS = self.nb, self.ns         # Python ints at trace time: loops unroll, arrays are static
        tidx, _, _ = cute.arch.thread_idx()
        rank, row, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout((NWARPS, 2 * NS), stride=(2 * NS, 1)),
                                   byte_alignment=16)
        part = smem.allocate_tensor(Float32, cute.make_layout((2 * NS,)), byte_alignment=16)
        red2 = smem.allocate_tensor(Float32, cute.make_layout((NWARPS,)), byte_alignment=16)
        part2 = smem.allocate_tensor(Float32, cute.make_layout((4,)), byte_alignment=16)

        vl = cute.make_layout((VEC,), stride=(1,))
        src = [[cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)] for _ in range(NS)]
        rd = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwr = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwn = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        mixf = [cute.make_rmem_tensor(vl, Float32) for _ in range(NV)]
        gp, gd, gnp, go = mP[row, None], mD[row, None], mNP[row, None], mOut[row, None]
        # vector index (in VEC units along H) of this thread's k-th vector; `full[k]`: no thread of
        # the CTA is idle at k (trace-time), else `live(k)` tells this thread's
        vix = [rank * SV + k * THREADS + tidx for k in range(NV)]
        full = [EXACT or (k + 1) * THREADS <= SV for k in range(NV)]
        if const_expr(not EXACT):
            for k in cutlass.range_constexpr(NV):
                if const_expr(not full[k]):
                    for j in cutlass.range_constexpr(NS):
                        src[j][k].fill(0.0)
                    rd[k].fill(0.0)
                    rwr[k].fill(0.0)
                    rwn[k].fill(0.0)

        # weights do not depend on the previous kernel: load them before the PDL wait
        for k in cutlass.range_constexpr(NV):
            if const_expr(full[k]):
                cute.autovec_copy(cute.local_tile(mWr, (VEC,), (vix[k],)), rwr[k])
                cute.autovec_copy(cute.local_tile(mWn, (VEC,), (vix[k],)), rwn[k])
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(cute.local_tile(mWr, (VEC,), (vix[k],)), rwr[k])
                    cute.autovec_copy(cute.local_tile(mWn, (VEC,), (vix[k],)), rwn[k])
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()
        for k in cutlass.range_constexpr(NV):
            if const_expr(full[k]):
                cute.autovec_copy(cute.local_tile(gp, (VEC,), (vix[k],)), src[NB][k])
                cute.autovec_copy(cute.local_tile(gd, (VEC,), (vix[k],)), rd[k])
                for j in cutlass.range_constexpr(NB):
                    cute.autovec_copy(cute.local_tile(mB[row, j, None], (VEC,), (vix[k],)), src[j][k])
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(cute.local_tile(gp, (VEC,), (vix[k],)), src[NB][k])
                    cute.autovec_copy(cute.local_tile(gd, (VEC,), (vix[k],)), rd[k])
                    for j in cutlass.range_constexpr(NB):
                        cute.autovec_copy(cute.local_tile(mB[row, j, None], (VEC,), (vix[k],)), src[j][k])

        # new_prefix = bf16(prefix + delta): rounded once, stored, and mixed as the rounded value
        # (an idle vector: 0 + 0 = 0, not stored)
        for k in cutlass.range_constexpr(NV):
            src[NB][k].store((src[NB][k].load().to(Float32) + rd[k].load().to(Float32)).to(BFloat16))
            if const_expr(full[k]):
                cute.autovec_copy(src[NB][k], cute.local_tile(gnp, (VEC,), (vix[k],)))
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(src[NB][k], cute.local_tile(gnp, (VEC,), (vix[k],)))

        # phase 1, per source j: ss_j = sum V_j^2 and dt_j = V_j . w_res over the slice
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
        if warp == 0:
            if lane < 2 * NS:
                c = Float32(0.0)
                for w in cutlass.range_constexpr(NWARPS):
                    c += red[w, lane]
                part[lane] = c                                          # this CTA's partial of column `lane`
        cute.arch.cluster_arrive()                                      # release: part visible cluster-wide
        cute.arch.cluster_wait()                                        # acquire: every CTA's part written

        # lane j < NS of every warp: logit_j from the CS partials in rank order; lanes >= NS carry -inf
        logit = Float32(-math.inf)
        if lane < NS:
            ssj = Float32(0.0)
            dtj = Float32(0.0)
            for q in cutlass.range_constexpr(CS):
                ssj += ld_cluster_f32(part.iterator + lane, q)
                dtj += ld_cluster_f32(part.iterator + (NS + lane), q)
            logit = dtj * cute.math.rsqrt(ssj * (1.0 / HIDDEN) + EPS, fastmath=True)
        mx = cute.arch.warp_reduction(logit, cute.arch.fmax)
        e = cute.math.exp2((logit - mx) * LOG2E, fastmath=True)      # exp2(-inf) = 0 for lanes >= NS
        den = cute.arch.warp_reduction(e, operator.add)
        pl = e / den
        p = [cute.arch.shuffle_sync(pl, j) for j in range(NS)]         # shfl.idx from lane j

        # phase 2: the mix from registers, its sum of squares reduced the same way
        ss2 = Float32(0.0)
        for k in cutlass.range_constexpr(NV):
            m = src[NB][k].load().to(Float32) * p[NB]
            for j in cutlass.range_constexpr(NB):
                m = m + src[j][k].load().to(Float32) * p[j]
            mixf[k].store(m)
            ss2 += (m * m).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
        ss2 = cute.arch.warp_reduction(ss2, operator.add)
        if lane == 0:
            red2[warp] = ss2
        cute.arch.barrier()
        if warp == 0:
            if lane == 0:
                c2 = Float32(0.0)
                for w in cutlass.range_constexpr(NWARPS):
                    c2 += red2[w]
                part2[0] = c2
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()
        tot = Float32(0.0)
        for q in cutlass.range_constexpr(CS):
            tot += ld_cluster_f32(part2.iterator, q)                    # the same address in every lane: one broadcast
        rstd = cute.math.rsqrt(tot * (1.0 / HIDDEN) + EPS, fastmath=True)
        cute.arch.cluster_arrive()                                      # done reading the peers' shared memory

        for k in cutlass.range_constexpr(NV):
            y = mixf[k].load() * rstd * rwn[k].load().to(Float32)
            rd[k].store(y.to(BFloat16))
            if const_expr(full[k]):
                cute.autovec_copy(rd[k], cute.local_tile(go, (VEC,), (vix[k],)))
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(rd[k], cute.local_tile(go, (VEC,), (vix[k],)))
        cute.arch.cluster_wait()                                        # no peer still reads this CTA's part2


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
    return cute.compile(AttnResCluster(nb), act(), act(), blocks, w(), w(), act(), act(), stream, options=options)


def launch(compiled, prefix, delta, blocks, w_res, w_norm, out, new_prefix) -> None:
    compiled(prefix, delta, blocks, w_res, w_norm, out, new_prefix)
