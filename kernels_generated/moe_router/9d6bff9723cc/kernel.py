"""moe_router, fused and simple: one CTA per token.

    logits[e] = sum_h x[h] * Wg[e, h]        fp32 accumulate (CUDA cores)
    s = sigmoid(logits); ids = top16(s + bias); w = s[ids] / sum(s[ids])

Phase 1: 16 warps split the 896 experts (56 each); per expert the 32 lanes stream the
weight row with 16-B loads (7168 bf16 = 896 vectors = 28 per lane), reduce by butterfly,
and lane 0 stores the fp32 logit in shared memory (896 x 4 B = 3.5 KiB).
Phase 2: warp 0 owns all 896 scores, 28 per lane (expert = j * 32 + lane), and runs 16
rounds of warp argmax (ties to the lower expert id); lane r keeps the round-r winner.
Every CTA re-reads the whole 12.8 MB weight (from L2 when B > 1): correct, not tuned.
"""
import operator

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

HIDDEN = 7168
EXPERTS = 896
TOP_K = 16
VEC = 8                                  # bf16 per 16-B load
WARPS = 16
LANE_VECS = HIDDEN // (VEC * 32)         # 28 vectors per lane per weight row
LANE_EXPERTS = EXPERTS // 32             # 28 experts per lane in the top-k phase


class FusedRouter:
    @cute.jit
    def __call__(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mTopW: cute.Tensor,
                 mTopI: cute.Tensor, stream: cuda.CUstream):
        self.kernel(mX, mW, mBias, mTopW, mTopI).launch(
            grid=[mX.shape[0], 1, 1], block=[32 * WARPS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mW: cute.Tensor, mBias: cute.Tensor, mTopW: cute.Tensor,
               mTopI: cute.Tensor):
        lane, warp = cute.arch.lane_idx(), cute.arch.warp_idx()
        row, _, _ = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        sLogit = smem.allocate_tensor(Float32, cute.make_layout((EXPERTS,)), byte_alignment=16)

        rx = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
        rw = cute.make_rmem_tensor((VEC,), cutlass.BFloat16)
        for j in cutlass.range(EXPERTS // WARPS):
            e = j * WARPS + warp
            acc = Float32(0.0)
            for it in cutlass.range_constexpr(LANE_VECS):
                kv = it * 32 + lane                       # 16-B vector index along H
                cute.autovec_copy(cute.local_tile(mW[e, None], (VEC,), (kv,)), rw)
                cute.autovec_copy(cute.local_tile(mX[row, None], (VEC,), (kv,)), rx)
                acc += (rx.load().to(Float32) * rw.load().to(Float32)).reduce(
                    cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)
            acc = cute.arch.warp_reduction(acc, operator.add)
            if lane == 0:
                sLogit[e] = acc
        cute.arch.barrier()

        if warp == 0:
            key = cute.make_rmem_tensor((LANE_EXPERTS,), Float32)    # s + bias: selects
            sc = cute.make_rmem_tensor((LANE_EXPERTS,), Float32)     # s: weighs
            for j in cutlass.range_constexpr(LANE_EXPERTS):
                e = j * 32 + lane
                s = Float32(1.0) / (Float32(1.0) + cute.math.exp(-sLogit[e]))
                sc[j] = s
                key[j] = s + mBias[e]
            my_w, my_id, wsum = Float32(0.0), Int32(0), Float32(0.0)
            for r in cutlass.range(TOP_K, unroll=1):
                # lane-local best; scanning j upwards keeps the lower id on ties
                bk, bs, bi = -Float32.inf, Float32(0.0), Int32(EXPERTS)
                for j in cutlass.range_constexpr(LANE_EXPERTS):
                    take = key[j] > bk
                    bk = cutlass.select_(take, key[j], bk)
                    bs = cutlass.select_(take, sc[j], bs)
                    bi = cutlass.select_(take, j * 32 + lane, bi)
                for off in cutlass.range_constexpr(5):          # butterfly: all lanes get the winner
                    ok = cute.arch.shuffle_sync_bfly(bk, offset=1 << off)
                    os_ = cute.arch.shuffle_sync_bfly(bs, offset=1 << off)
                    oi = cute.arch.shuffle_sync_bfly(bi, offset=1 << off)
                    take = (ok > bk) | ((ok == bk) & (oi < bi))
                    bk = cutlass.select_(take, ok, bk)
                    bs = cutlass.select_(take, os_, bs)
                    bi = cutlass.select_(take, oi, bi)
                for j in cutlass.range_constexpr(LANE_EXPERTS):  # retire the winner in its owner lane
                    if j * 32 + lane == bi:
                        key[j] = -Float32.inf
                wsum += bs
                if lane == r:
                    my_w, my_id = bs, bi
            if lane < TOP_K:
                mTopW[row, lane] = my_w / wsum                  # routed_scaling_factor = 1.0 on K3
                mTopI[row, lane] = my_id


def compile(tp, options, **static):
    # Shapes do not depend on TP: the router is replicated on every rank.
    b = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor
    x = fake(cutlass.BFloat16, (b, HIDDEN), stride_order=(1, 0), assumed_align=16)
    w = fake(cutlass.BFloat16, (EXPERTS, HIDDEN), stride_order=(1, 0), assumed_align=16)
    bias = fake(Float32, (EXPERTS,), assumed_align=16)
    top_w = fake(Float32, (b, TOP_K), stride_order=(1, 0), assumed_align=16)
    top_i = fake(Int32, (b, TOP_K), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(FusedRouter(), x, w, bias, top_w, top_i, stream, options=options)


def launch(compiled, x, router_weight, e_score_bias, topk_weights, topk_ids):
    compiled(x, router_weight, e_score_bias, topk_weights, topk_ids)
