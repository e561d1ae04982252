"""add_rmsnorm candidate: one CTA per row, the whole row in registers. UNVERIFIED on a GPU
(compiled for sm_90a / sm_103a on a CPU only; correctness and timing not yet run).

Rendered from prompts/kernels/add_rmsnorm/rowreg.py.j2 with threads=224 vec=8 pdl=False
    r = bf16(x + residual);  residual_out = r;  out = bf16(r * rsqrt(mean(r^2) + eps) * w)
The norm reads the bf16-ROUNDED sum r (the reference's reading), not the fp32 sum.
Grid (B,), block THREADS. Thread t owns the VEC-wide vectors k*THREADS + t, k < NV
(NV = H / (THREADS * VEC)): consecutive threads read consecutive 16-byte (VEC=8) chunks, so a
warp's access is fully coalesced. Sum of squares: thread-local fp32 sum -> 5-step warp
butterfly -> one fp32 per warp in shared memory -> barrier -> every warp re-reduces the partials.
"""
from __future__ import annotations

import operator

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, const_expr

HIDDEN = 7168
EPS = 1e-5
THREADS = 224
VEC = 8                           # bf16 per access (16 bytes)
USE_PDL = False
NV = HIDDEN // (THREADS * VEC)            # vectors per thread
NWARPS = THREADS // 32
# a power-of-two warp count lets each lane group of NWARPS re-read all partials and finish
# with a log2(NWARPS)-step butterfly; otherwise lanes >= NWARPS contribute 0 to a full butterfly
POW2_WARPS = (NWARPS & (NWARPS - 1)) == 0
assert NV * THREADS * VEC == HIDDEN and THREADS % 32 == 0


class AddRMSNorm:
    @cute.jit
    def __call__(self, mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mOut: cute.Tensor,
                 mROut: cute.Tensor, stream: cuda.CUstream):
        self.kernel(mX, mR, mW, mOut, mROut).launch(grid=[mX.shape[0], 1, 1], block=[THREADS, 1, 1],
                                                    stream=stream, use_pdl=USE_PDL)

    @cute.kernel
    def kernel(self, mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mOut: cute.Tensor,
               mROut: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        row, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        smem = cutlass.memory.SmemAllocator()
        red = smem.allocate_tensor(Float32, cute.make_layout((NWARPS,)), byte_alignment=16)

        vl = cute.make_layout((VEC,), stride=(1,))
        rx = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rr = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rw = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        hf = [cute.make_rmem_tensor(vl, Float32) for _ in range(NV)]
        gx, gr, gw = mX[row, None], mR[row, None], mW
        go, gro = mOut[row, None], mROut[row, None]

        # the weight does not depend on the previous kernel: load it before the PDL wait
        for k in cutlass.range_constexpr(NV):
            cute.autovec_copy(cute.local_tile(gw, (VEC,), (k * THREADS + tidx,)), rw[k])
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_wait()
        for k in cutlass.range_constexpr(NV):
            cute.autovec_copy(cute.local_tile(gx, (VEC,), (k * THREADS + tidx,)), rx[k])
            cute.autovec_copy(cute.local_tile(gr, (VEC,), (k * THREADS + tidx,)), rr[k])

        ss = Float32(0.0)
        for k in cutlass.range_constexpr(NV):
            # r = bf16(x + r): round once, store, and square the ROUNDED value
            hb = (rx[k].load().to(Float32) + rr[k].load().to(Float32)).to(BFloat16)
            rx[k].store(hb)
            cute.autovec_copy(rx[k], cute.local_tile(gro, (VEC,), (k * THREADS + tidx,)))
            h = hb.to(Float32)
            hf[k].store(h)
            ss += (h * h).reduce(cute.ReductionOp.ADD, init_val=Float32(0.0), reduction_profile=0)

        ss = cute.arch.warp_reduction(ss, operator.add)            # 5 x shfl.bfly, all 32 lanes
        if lane == 0:
            red[warp] = ss
        cute.arch.barrier()
        if const_expr(POW2_WARPS):
            tot = red[lane % NWARPS]
            if const_expr(NWARPS > 1):
                tot = cute.arch.warp_reduction(tot, operator.add, threads_in_group=NWARPS)
        else:
            tot = Float32(0.0)
            if lane < NWARPS:
                tot = red[lane]
            tot = cute.arch.warp_reduction(tot, operator.add)
        rstd = cute.math.rsqrt(tot * (1.0 / HIDDEN) + EPS, fastmath=True)

        for k in cutlass.range_constexpr(NV):
            y = hf[k].load() * rstd * rw[k].load().to(Float32)
            rx[k].store(y.to(BFloat16))
            cute.autovec_copy(rx[k], cute.local_tile(go, (VEC,), (k * THREADS + tidx,)))
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()


def compile(tp: int, options: str, **static):
    """H = 7168 is replicated: the kernel is the same at every TP."""
    m = cute.sym_int()
    act = lambda: cute.runtime.make_fake_compact_tensor(BFloat16, (m, HIDDEN), stride_order=(1, 0), assumed_align=16)
    w = cute.runtime.make_fake_compact_tensor(BFloat16, (HIDDEN,), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(AddRMSNorm(), act(), act(), w, act(), act(), stream, options=options)


def launch(compiled, x, residual, weight, out, residual_out) -> None:
    compiled(x, residual, weight, out, residual_out)
