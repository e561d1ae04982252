"""attn_res candidate: one row over a cluster of CS CTAs (CS = 1: one CTA), every source of the CTA's
slice in registers (one pass over HBM), every reduction pushed into every CTA's shared memory ahead
of one cluster barrier (no CTA barrier, no peer loads, no exit barrier).

Rendered from prompts/kernels/attn_res/gramhybrid.py.j2 with small_cs=7 small_threads=128 large_cs=7 large_threads=128 vec=8 b_switch=32 r1_max_nb=4 large_min_nb=3 large_pull_min_nb=9 pdl=False async_push=True lean=True
TWO launch plans behind one callable (ByBatch), chosen per call by the batch B and per compile by
NB: B <= B_SWITCH, or NB < LARGE_MIN_NB, takes SMALL (CS=7 x 128 threads; rounds 1 while
NB <= R1_MAX_NB, else 2); larger B takes LARGE (CS=7 x 128 threads, rounds 2), or from
NB >= LARGE_PULL_MIN_NB on the clustermix kernel embedded below (AttnResCluster, the same CS x threads:
a CTA barrier, the peers' partials pulled through DSMEM, an exit barrier). Why: the one-round Gram
plan is the fastest at small B but holds NS (NS + 3) / 2 partials per thread; with many rows its
register count caps CTAs per SM, and B * CS CTAs then run in two waves; at NB 7-8 and B = 64 the
pushed two rounds measured 1-2% slower than clustermix, which the perf gate's 2% noise allowance
rejected at nb7 (H200, session 7: results/h200/session7/).
NB (sealed blocks, 1..8) is a compile-time parameter from the static key shape="nb<NB>" ("" = nb8).
`blocks` [B, NB, H] may be a view of a [B, 8, H] buffer (dynamic batch stride, a multiple of 8 bf16).
    new_prefix = bf16(prefix + delta);  V = [blocks_0 .. blocks_{NB-1}, new_prefix]   (NS = NB + 1)
    logit_j = d_j * rsqrt(s_j / H + eps), s_j = V_j . V_j, d_j = V_j . w_res;  p = softmax(logit)
    mixed = sum_j p_j V_j (fp32);  out = bf16(mixed * rsqrt(sum(mixed^2) / H + eps) * w_norm)
rounds=1 (ONE reduction round): the Gram matrix G_ab = V_a . V_b (a <= b, NS (NS + 1) / 2 values,
G_jj = s_j) and the dots d_j; sum(mixed^2) = sum_ab p_a p_b G_ab, so no second reduction waits on
the softmax. The identity is exact algebra; in fp32 its relative error grows with the cancellation
sum_ab p_a p_b |G_ab| / sum(mixed^2), harmless for a rsqrt feeding a bf16 output unless the mix
cancels its sources by orders of magnitude (the result is clamped at 0 before the rsqrt).
rounds=2: round 1 reduces (s_j, d_j), round 2 sum(mixed^2) (2 NS + 1 values instead of NS (NS + 3) / 2:
fewer registers).
Grid (CS, B), cluster (CS, 1, 1) when CS > 1: row = block_idx.y, rank = block_idx.x. CTA `rank` owns
the SV = H / (CS * VEC) VEC-wide vectors rank*SV .. rank*SV + SV - 1 of every source; thread t owns
vectors rank*SV + k*THREADS + t, k < NV (coalesced 16-byte loads for VEC=8); a vector with
k*THREADS + t >= SV is neither loaded (zeros: it adds 0 to every sum) nor stored.
Round 1, in a fixed order so every warp of every CTA computes bit-identical p and rstd: each thread
sums its NVAL partials over its vectors k in order; a halving butterfly reduces the warp's NVAL
values with P/2 + P/4 + ... shuffles instead of 5 * NVAL (P = NVAL rounded up to a power of 2: at
offset 16 a lane keeps one half of its list and adds its partner's copy of that half, at 8 a
quarter, ...; offsets left once two values remain are plain butterflies), leaving lane l with the
warp's totals of values 2 (l >> SHIFT) and 2 (l >> SHIFT) + 1. Those lanes PUSH them into slot
(rank, warp) of a [CS * NWARPS, NVAL] buffer in every CTA of the cluster (mapa + st.shared::cluster,
own CTA included); one cluster barrier (arrive.release / wait.acquire; CS = 1: a CTA barrier)
publishes them. After it every read is local: lane l sums columns l and l + 32 over the slots in
order, every lane gathers the NVAL totals by shfl.idx and forms logits and softmax itself (and, for
rounds=1, the Gram quadratic form). Round 2: each thread's sum of mix^2 over its vectors, the 5-step
warp butterfly, lane 0 pushes it into slot (rank, warp) of a second buffer in every CTA, a second
barrier, every thread sums the slots in order. No CTA reads a peer's shared memory, so none waits
for its peers before it exits.
ASYNC_PUSH (CS > 1): each push is an st.async that completes its 4 bytes on the receiving CTA's
mbarrier (one per round); a CTA waits on its own mbarrier instead of the cluster barrier, so there is
no release arrive and no MEMBAR (kda's push, session 10). Lanes of a group that holds the same totals
push to different CTAs in one instruction. The mbarrier inits are ordered before any push by a
relaxed cluster arrive at the start, its wait just before the first push.
LEAN (session 16; the ncu profile of session 15 counted ~910 instructions per warp, half of them fixed
per warp, and at small B the kernel issues more than it waits): the same sums with fewer instructions.
bf16 -> fp32 by shift / mask of each 32-bit word (unpack_bf16: one instruction per value instead of
two), every per-element sum an explicit FMA chain over the thread's elements in order; an EXACT
halving butterfly (halving_sizes: a lane keeps ceil(n / 2) of its n values at each offset, no padding
to a power of 2: 20 shuffles for nb8's 18 values instead of 32) that leaves lane l with the totals of
values OFF(l) + e (lane_values, near-consecutive across lanes: each push instruction writes a few
sectors of the peer's [SLOTS, NVAL] row; the first lean point, 808003, pushed into a [NVAL, SLOTS]
buffer, column-contiguous for 128-bit loads but one sector per lane of every push); the slot sums in
SLOT_CHAINS interleaved chains (chain_sum, also the order of the round-2 slots); the softmax by one
reciprocal (rcp.approx) instead of NS divisions.
"""
from __future__ import annotations

import math
import operator
from typing import NamedTuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32, Int32, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

HIDDEN = 7168
MAX_BLOCKS = 8                            # the K3 maximum (blocks[0] = the embedding)
EPS = 1e-5
LOG2E = 1.4426950408889634
USE_PDL = False
ASYNC_PUSH = True
LEAN = True
SLOT_CHAINS = 4                           # interleaved chains of a slot sum (chain_sum)


class Plan(NamedTuple):
    """One launch plan: CTAs per row (one cluster when > 1; 8 = the portable limit), threads per
    CTA, bf16 per vector access, reduction rounds (1: Gram, 2: sumsq then the mix's sumsq).
    7 CTAs split H exactly (7168 = 7 x 128 x 8); 7 x 128 ran 0.87-0.98x the time of 4 x 224 at every
    NB and B <= 32 in session 40 (results/h200/session40/)."""
    cs: int
    threads: int
    vec: int
    rounds: int

    def check(self) -> "Plan":
        assert self.cs in (1, 2, 4, 7, 8) and self.threads % 32 == 0 and self.rounds in (1, 2), self
        assert self.sv * self.cs * self.vec == HIDDEN and self.nv <= 2, self
        return self

    @property
    def sv(self) -> int:                  # vectors per CTA per source
        return HIDDEN // (self.cs * self.vec)

    @property
    def nv(self) -> int:                  # vectors per thread per source (the last may be idle)
        return -(-self.sv // self.threads)

    @property
    def exact(self) -> bool:              # no idle vector: no predication
        return self.nv * self.threads == self.sv

    @property
    def nwarps(self) -> int:
        return self.threads // 32

    @property
    def slots(self) -> int:               # one pushed row of partials per (rank, warp)
        return self.cs * self.nwarps


B_SWITCH = 32                         # B above this takes LARGE (when NB >= LARGE_MIN_NB)
R1_MAX_NB = 4                        # SMALL reduces in one round (Gram) while NB <= this
LARGE_MIN_NB = 3                     # NB below this never takes LARGE
LARGE_PULL_MIN_NB = 9                # B > B_SWITCH from this NB on runs LARGE_PULL (9: never)
SMALL_R1 = Plan(cs=7, threads=128, vec=8, rounds=1).check()
SMALL_R2 = Plan(cs=7, threads=128, vec=8, rounds=2).check()
LARGE = Plan(cs=7, threads=128, vec=8, rounds=2).check()


class PullPlan(NamedTuple):
    """The embedded clustermix kernel (AttnResCluster) at CS x threads: its constants are the
    module's CS, THREADS, VEC below."""
    cs: int
    threads: int
    vec: int


LARGE_PULL = PullPlan(cs=7, threads=128, vec=8)


def plan_for(nb: int, batch: int) -> Plan | PullPlan:
    """The plan a call with NB blocks and B rows runs."""
    if batch > B_SWITCH and nb >= LARGE_PULL_MIN_NB:
        return LARGE_PULL
    if batch > B_SWITCH and nb >= LARGE_MIN_NB:
        return LARGE
    return SMALL_R1 if nb <= R1_MAX_NB else SMALL_R2


def num_blocks(shape: str) -> int:
    """NB of the static key "nb1" .. "nb8" ("" = nb8); ValueError on anything else."""
    name = shape or f"nb{MAX_BLOCKS}"
    known = [f"nb{n}" for n in range(1, MAX_BLOCKS + 1)]
    if name not in known:
        raise ValueError(f"unknown attn_res shape '{shape}' (known: {', '.join(known)})")
    return int(name[2:])


def gram_pairs(ns: int, rounds: int) -> list[tuple[int, int]]:
    """The (a, b) whose products V_a . V_b round 1 reduces, in value order: a <= b (the Gram
    matrix) for rounds=1, (j, j) for rounds=2; the dots d_j follow at index len(pairs) + j."""
    if rounds == 1:
        return [(a, b) for a in range(ns) for b in range(a, ns)]
    return [(j, j) for j in range(ns)]


def butterfly_plan(nval: int) -> tuple[int, int]:
    """(P, HALVINGS): the value list padded to P (a power of 2, >= 2) and how many of the offsets
    16, 8, .. halve it (down to 2 values per lane; the remaining offsets are plain butterflies)."""
    p = 2
    while p < nval:
        p *= 2
    assert p <= 64, "at most 64 values per warp (NS <= 9 needs 54)"
    return p, p.bit_length() - 2


def halving_sizes(nval: int) -> list[int]:
    """Per offset 16, 8, 4, 2, 1: the length of the list a lane keeps, ceil(n / 2) of its n values
    while n > 1, else 0 (a plain butterfly: every lane adds its partner's copy)."""
    assert 1 <= nval <= 64, "at most 64 values per warp"
    sizes, n = [], nval
    for _ in range(5):
        n = (n + 1) // 2 if n > 1 else 0
        sizes.append(n)
        n = n or 1
    return sizes


def lane_values(nval: int) -> list[list[int | None]]:
    """lane_values(nval)[lane][e]: the value whose warp total lane `lane` holds in slot e after the
    exact halving butterfly (None: a padding slot, holding 0). At a halving offset the lower lanes keep
    the first ceil(n / 2) values of their list, the upper lanes the rest padded to that length."""
    out = []
    for lane in range(32):
        lst: list[int | None] = list(range(nval))
        for h, hs in enumerate(halving_sizes(nval)):
            if hs:
                lst = lst[hs:] + [None] * (2 * hs - len(lst)) if lane & (16 >> h) else lst[:hs]
        out.append(lst)
    return out


def real_masks(nval: int) -> list[int]:
    """Per final slot e, the lanes whose slot e holds a value, as an Int32 bit mask; checks that slot e
    of lane l holds value OFF(l) + e, OFF(l) = the sum of halving_sizes at the offsets set in l (the
    kernel's push computes the column so)."""
    sizes, lanes = halving_sizes(nval), lane_values(nval)
    for ln, vals in enumerate(lanes):
        off = sum(hs for h, hs in enumerate(sizes) if hs and ln & (16 >> h))
        assert all(v is None or v == off + e for e, v in enumerate(vals)), (nval, ln)
    masks = [sum(1 << ln for ln in range(32) if lanes[ln][e] is not None) for e in range(len(lanes[0]))]
    return [m - (1 << 32) if m >> 31 else m for m in masks]


def chain_sum(xs: list):
    """xs summed in SLOT_CHAINS interleaved chains (chain c: xs[c], xs[c + SLOT_CHAINS], ... in order),
    then the chains pairwise; a plain function of `+`, so the tests' emulation sums in this order too."""
    ch = list(xs[:SLOT_CHAINS])
    for i in range(SLOT_CHAINS, len(xs)):
        ch[i % SLOT_CHAINS] = ch[i % SLOT_CHAINS] + xs[i]
    while len(ch) > 1:
        ch = [ch[i] + ch[i + 1] if i + 1 < len(ch) else ch[i] for i in range(0, len(ch), 2)]
    return ch[0]


def unpack_bf16(t) -> list:
    """A register tensor of bf16 -> its values as fp32 scalars, in order: a bf16 is the upper half of
    its fp32, so the even element of each 32-bit word is the word shifted left 16, the odd one the word
    masked (one instruction each)."""
    w = t.load().bitcast(Uint32)
    out = []
    for i in range(w.shape[0]):
        out.append((w[i] << 16).bitcast(Float32))
        out.append((w[i] & Uint32(0xFFFF0000)).bitcast(Float32))
    return out


def fma_chain(xs: list, ys: list, acc=None):
    """acc + xs[0] ys[0] + xs[1] ys[1] + ..., one FMA after the other (lists of per-vector lists)."""
    acc = Float32(0.0) if acc is None else acc
    for x, y in zip(xs, ys):
        for i in range(len(x)):
            acc = acc + x[i] * y[i]
    return acc


def halving_butterfly(vals: list, lane) -> list:
    """The warp's exact halving butterfly (halving_sizes) over this lane's NVAL values: at offset `off`
    a lane keeps the lower or upper (bit `off` of its lane set) part and adds the partner's copy of it,
    sent by shfl.bfly; returns the lane's final values (lane_values)."""
    n = len(vals)
    for h, hs in enumerate(halving_sizes(n)):
        off = 16 >> h
        if hs:
            vals = vals + [Float32(0.0)] * (2 * hs - len(vals))
            upper = (lane & off) != 0
            nxt = []
            for i in range(hs):
                keep = cutlass.select_(upper, vals[i + hs], vals[i])
                send = cutlass.select_(upper, vals[i], vals[i + hs])
                nxt.append(keep + cute.arch.shuffle_sync_bfly(send, offset=off))
            vals = nxt
        else:
            vals = [v + cute.arch.shuffle_sync_bfly(v, offset=off) for v in vals]
    return vals


@dsl_user_op
def st_cluster_f32(smem_ptr, rank, val, *, loc=None, ip=None) -> None:
    """Store an fp32 at this shared-memory address of cluster CTA `rank` (mapa turns the CTA-local
    address into the peer's window of the cluster's shared space, st.shared::cluster writes it)."""
    local = llvm.ptrtoint(T.i32(), smem_ptr.to_llvm_ptr(loc=loc, ip=ip), loc=loc, ip=ip)
    llvm.inline_asm(
        None, [local, Int32(rank).ir_value(loc=loc, ip=ip), Float32(val).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .b32 peer;\n\tmapa.shared::cluster.u32 peer, $0, $1;\n\tst.shared::cluster.f32 [peer], $2;\n\t}",
        "r,r,f,~{memory}", has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT,
        loc=loc, ip=ip)


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


class AttnResPush:
    def __init__(self, nb: int, plan: Plan):
        self.nb = nb                      # blocks mixed (compile-time)
        self.ns = nb + 1                  # sources: the blocks + new_prefix
        self.plan = plan

    @cute.jit
    def __call__(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
                 mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor, stream: cuda.CUstream):
        kern = self.kernel(mP, mD, mB, mWr, mWn, mOut, mNP)
        if const_expr(self.plan.cs > 1):
            kern.launch(grid=[self.plan.cs, mP.shape[0], 1], block=[self.plan.threads, 1, 1],
                        cluster=[self.plan.cs, 1, 1], stream=stream, use_pdl=USE_PDL)
        else:
            kern.launch(grid=[1, mP.shape[0], 1], block=[self.plan.threads, 1, 1], stream=stream, use_pdl=USE_PDL)

    @cute.kernel
    def kernel(self, mP: cute.Tensor, mD: cute.Tensor, mB: cute.Tensor, mWr: cute.Tensor,
               mWn: cute.Tensor, mOut: cute.Tensor, mNP: cute.Tensor):
        NB, NS = self.nb, self.ns         # Python ints at trace time: loops unroll, arrays are static
        pl = self.plan
        CS, THREADS, VEC, ROUNDS = pl.cs, pl.threads, pl.vec, pl.rounds
        SV, NV, EXACT, NWARPS, SLOTS = pl.sv, pl.nv, pl.exact, pl.nwarps, pl.slots
        PAIRS = gram_pairs(NS, ROUNDS)
        NG = len(PAIRS)
        NVAL = NG + NS
        SIZES = halving_sizes(NVAL)       # the exact halving butterfly: lane l ends with LANES[l]
        REAL = real_masks(NVAL)           # per final slot e: the lanes whose slot e holds a value
        NFIN = len(REAL)                  # values a lane holds after it (1 for NVAL <= 32)
        GROUP = 1 << SIZES.count(0)       # lanes holding the same values: the plain offsets are the low bits
        tidx, _, _ = cute.arch.thread_idx()
        rank, row, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        warp = cute.arch.warp_idx()
        smem = cutlass.memory.SmemAllocator()
        buf = smem.allocate_tensor(Float32, cute.make_layout((SLOTS, NVAL), stride=(NVAL, 1)), byte_alignment=16)
        buf2 = smem.allocate_tensor(Float32, cute.make_layout((SLOTS,)), byte_alignment=16)   # round 2
        if const_expr(CS > 1):
            # the peers' pushes land on mbar[round - 1] by st.async; every CTA's mbarriers must be
            # initialised before anyone pushes: a relaxed cluster arrive now, its wait before the first push
            mbar = smem.allocate_tensor(cutlass.Int64, cute.make_layout((2,)), byte_alignment=8)
            if tidx == 0:
                cute.arch.mbarrier_init(mbar.iterator, 1)
                cute.arch.mbarrier_init(mbar.iterator + 1, 1)
                cute.arch.mbarrier_init_fence()
            cute.arch.cluster_arrive_relaxed()

        vl = cute.make_layout((VEC,), stride=(1,))
        src = [[cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)] for _ in range(NS)]
        rd = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwr = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        rwn = [cute.make_rmem_tensor(vl, BFloat16) for _ in range(NV)]
        gp, gd, gnp, go = mP[row, None], mD[row, None], mNP[row, None], mOut[row, None]
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
        for k in cutlass.range_constexpr(NV):
            pf, df = unpack_bf16(src[NB][k]), unpack_bf16(rd[k])
            npf = cute.make_rmem_tensor(vl, Float32)
            for i in cutlass.range_constexpr(VEC):
                npf[i] = pf[i] + df[i]
            src[NB][k].store(npf.load().to(BFloat16))
            if const_expr(full[k]):
                cute.autovec_copy(src[NB][k], cute.local_tile(gnp, (VEC,), (vix[k],)))
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(src[NB][k], cute.local_tile(gnp, (VEC,), (vix[k],)))

        # this thread's partials, each one FMA chain over its elements in order: the products in
        # gram_pairs order, then the dots with w_res
        vf = [[unpack_bf16(src[j][k]) for k in range(NV)] for j in range(NS)]
        wr = [unpack_bf16(rwr[k]) for k in range(NV)]
        vals = [fma_chain(vf[a], vf[b]) for a, b in PAIRS] + [fma_chain(vf[j], wr) for j in range(NS)]
        vals = halving_butterfly(vals, lane)

        # push this warp's totals into column OFF(lane) + e, slot (rank, warp) of every CTA of the cluster
        base = Int32(0)
        for h in cutlass.range_constexpr(5):
            if const_expr(SIZES[h] > 0):
                base = base + ((lane >> (4 - h)) & 1) * SIZES[h]
        sub = lane & (GROUP - 1)                                        # lanes of a group hold the same totals
        slot = rank * NWARPS + warp
        if const_expr(CS > 1):
            cute.arch.cluster_wait()                                    # every CTA's mbarriers are initialised
            if tidx == 0:
                cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator, 4 * SLOTS * NVAL)
        for e in cutlass.range_constexpr(NFIN):
            if ((Int32(REAL[e]) >> lane) & 1) != 0:                     # slot e of this lane holds a value
                if const_expr(CS == 1):
                    if sub == 0:
                        buf[slot, base + e] = vals[e]
                elif const_expr(CS <= GROUP):
                    if sub < CS:                                        # lane `sub` of the group pushes to CTA sub
                        st_async_f32(buf.iterator + (slot * NVAL + base + e), mbar.iterator, sub, vals[e])
                else:
                    if sub == 0:
                        for q in cutlass.range_constexpr(CS):
                            st_async_f32(buf.iterator + (slot * NVAL + base + e), mbar.iterator, q, vals[e])
        if const_expr(CS > 1):
            cute.arch.mbarrier_wait(mbar.iterator, 0)                   # every CTA's pushes landed here
        else:
            cute.arch.barrier()

        # every lane: the column totals over the slots (lane l: columns l and l + 32), chain_sum order
        tot = []
        for c in cutlass.range_constexpr((NVAL + 31) // 32):
            t = Float32(0.0)
            if lane + c * 32 < NVAL:
                t = chain_sum([buf[s, lane + c * 32] for s in range(SLOTS)])
            tot.append(t)
        allv = [cute.arch.shuffle_sync(tot[i // 32], i % 32) for i in range(NVAL)]
        gidx = {pr: g for g, pr in enumerate(PAIRS)}
        logit = [allv[NG + j] * cute.math.rsqrt(allv[gidx[(j, j)]] * (1.0 / HIDDEN) + EPS, fastmath=True)
                 for j in range(NS)]
        mx = logit[0]
        for j in cutlass.range_constexpr(1, NS):
            mx = cute.arch.fmax(mx, logit[j])
        ex = [cute.math.exp2((logit[j] - mx) * LOG2E, fastmath=True) for j in range(NS)]
        den = ex[0]
        for j in cutlass.range_constexpr(1, NS):
            den = den + ex[j]
        rden = cute.arch.rcp_approx(den)
        p = [ex[j] * rden for j in range(NS)]
        mixf = []                                                       # per vector k, its VEC mixed values
        for k in cutlass.range_constexpr(NV):
            mk = []
            for i in cutlass.range_constexpr(VEC):
                m = vf[NB][k][i] * p[NB]
                for j in cutlass.range_constexpr(NB):
                    m = m + vf[j][k][i] * p[j]
                mk.append(m)
            mixf.append(mk)
        if const_expr(ROUNDS == 1):
            qf = Float32(0.0)
            for g in cutlass.range_constexpr(NG):
                a, b = PAIRS[g]
                qf += (p[a] * p[b] * (1.0 if a == b else 2.0)) * allv[g]
            rstd = cute.math.rsqrt(cute.arch.fmax(qf, Float32(0.0)) * (1.0 / HIDDEN) + EPS, fastmath=True)
        else:
            ss2 = fma_chain(mixf, mixf)
            for h in cutlass.range_constexpr(5):
                ss2 = ss2 + cute.arch.shuffle_sync_bfly(ss2, offset=16 >> h)
            if const_expr(CS > 1):
                if tidx == 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar.iterator + 1, 4 * SLOTS)
                if lane < CS:                                           # lane q pushes to CTA q
                    st_async_f32(buf2.iterator + slot, mbar.iterator + 1, lane, ss2)
                cute.arch.mbarrier_wait(mbar.iterator + 1, 0)
            else:
                if lane == 0:
                    buf2[warp] = ss2
                cute.arch.barrier()
            rstd = cute.math.rsqrt(chain_sum([buf2[s] for s in range(SLOTS)]) * (1.0 / HIDDEN) + EPS, fastmath=True)

        for k in cutlass.range_constexpr(NV):
            wn = unpack_bf16(rwn[k])
            y = cute.make_rmem_tensor(vl, Float32)
            for i in cutlass.range_constexpr(VEC):
                y[i] = mixf[k][i] * rstd * wn[i]
            rd[k].store(y.load().to(BFloat16))
            if const_expr(full[k]):
                cute.autovec_copy(rd[k], cute.local_tile(go, (VEC,), (vix[k],)))
            else:
                if k * THREADS + tidx < SV:
                    cute.autovec_copy(rd[k], cute.local_tile(go, (VEC,), (vix[k],)))
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()


# ---- the clustermix kernel (prompts/kernels/attn_res/_clustermix.j2, embedded: LARGE_PULL) ----
CS = 7                             # CTAs per row (one cluster; 8 = the portable cluster limit)
THREADS = 128
VEC = 8                           # bf16 per access (16 bytes)
SV = HIDDEN // (CS * VEC)                 # vectors per CTA per source
NV = -(-SV // THREADS)                    # vectors per thread per source (the last may be idle)
EXACT = NV * THREADS == SV                # no idle vector: no predication
NWARPS = THREADS // 32
assert SV * CS * VEC == HIDDEN and THREADS % 32 == 0 and 2 <= CS <= 8 and 2 * (MAX_BLOCKS + 1) <= 32


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
        if const_expr(USE_PDL):
            cute.arch.griddepcontrol_launch_dependents()
        cute.arch.cluster_wait()                                        # no peer still reads this CTA's part2



assert (CS, THREADS, VEC) == tuple(LARGE_PULL)


def _compile_plan(nb: int, plan: Plan, options: str):
    m = cute.sym_int()
    act = lambda: cute.runtime.make_fake_compact_tensor(BFloat16, (m, HIDDEN), stride_order=(1, 0), assumed_align=16)
    blocks = cute.runtime.make_fake_tensor(BFloat16, (m, nb, HIDDEN), stride=(cute.sym_int64(divisibility=8), HIDDEN, 1),
                                           assumed_align=16)
    w = lambda: cute.runtime.make_fake_compact_tensor(BFloat16, (HIDDEN,), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    kernel = AttnResCluster(nb) if isinstance(plan, PullPlan) else AttnResPush(nb, plan)
    return cute.compile(kernel, act(), act(), blocks, w(), w(), act(), act(), stream, options=options)


class ByBatch:
    """The compiled plans of one NB behind one callable: each call runs plan_for(NB, B)'s kernel
    (the choice is made on the host from prefix.shape[0], so a CUDA graph captures one of them)."""

    def __init__(self, nb: int, compiled: dict[Plan, object]):
        self.nb = nb
        self.compiled = compiled

    def __call__(self, prefix, delta, blocks, w_res, w_norm, out, new_prefix) -> None:
        self.compiled[plan_for(self.nb, prefix.shape[0])](prefix, delta, blocks, w_res, w_norm, out, new_prefix)


def compile(tp: int, options: str, shape: str = "nb8", **static):
    """H = 7168 is replicated: the kernels are the same at every TP; NB comes from `shape`. Compiles
    the plans NB can take (one or two)."""
    nb = num_blocks(shape)
    plans = {plan_for(nb, 1), plan_for(nb, 64)}
    return ByBatch(nb, {p: _compile_plan(nb, p, options) for p in plans})


def launch(compiled, prefix, delta, blocks, w_res, w_norm, out, new_prefix) -> None:
    compiled(prefix, delta, blocks, w_res, w_norm, out, new_prefix)
