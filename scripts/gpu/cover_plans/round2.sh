# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 2 (session 53): the skinny GEMMs still on cuBLAS at B 1..8 that a kernel
# could beat by the 5% bar. From round 1's H100 bench (results/h100/session51/propose.txt), against a
# plain copy of the bytes ("copy") and cuBLAS:
#   kda_o_proj = mla_o_proj TP8 (K 1536, N 7168): copy 9.3 us, cuBLAS 10.3, best render 10.2 (aa998e);
#   mla_q_b TP8 (K 1536, N 2304): copy 4.2, cuBLAS 5.8, best 5.8;
#   dense_down TP16 (K 2112, N 7168): copy 12.0, cuBLAS 13.0, best 13.6;
#   dense_down TP8 (K 4224, N 7168): copy 22.3, cuBLAS 23.5, best 22.3-22.8 (1.045-1.056: at the bar).
# (dense_gate_up TP8 is left out: cuBLAS there is within 1.5% of the copy.)
# Round 1's renders were 268009's 8 warps, whose chunked small kernel holds 150 registers: one CTA an
# SM, so N = 7168's 448 CTAs run in 3.4 waves (aa998e's 4-warp ring, 54 registers, all resident, came
# closest). These renders keep every CTA resident (all but 1a29f0 at dense_down: 1.7 waves; from
# scripts/swapab_residency.py, sm_90a registers) and vary how each warp's bytes stay in flight:
# 2 or 4 warps, the ring or the chunked loop, bulk copies,
# 2- and 4-CTA K splits (896 CTAs: 6.8 a SM instead of 448's 3.4, so the SMs end closer together).
#
# RENDERS: "op id base render_variant.py-args" (see round1.sh). SKINNY_EXCLUDE: the shapes (or
# shape@tp points) pick_winner never proposes; SKINNY_SKIP: the shape@tp points the bench leaves out.
SKINNY_SHAPES=kda_o_proj,mla_o_proj,mla_q_b,dense_down
SKINNY_EXCLUDE=kda_o_proj@16,mla_o_proj@16,mla_q_b@16      # a87a4d and 892ca1 run there: not proposed,
SKINNY_SKIP=$SKINNY_EXCLUDE                                 # nor benched
RENDERS=(
  # round 1's closest (aa998e's params: w4 u8 t396 cl8 ring), the control
  "skinny_gemm 91b2a0cb8519 268009 --set max_cluster=8 --set ring=true --set warps=4 --set unroll=8 --set ctas_target=396"
  # the ring on 2 warps a CTA: no cluster; 2-CTA K split (unroll 6, 8); 4-CTA split for mla_q_b's 144 row blocks
  "skinny_gemm 24d08221e198 268009 --set warps=2 --set unroll=6 --set ring=true --set max_cluster=1"
  "skinny_gemm b94e37e0b534 268009 --set warps=2 --set unroll=6 --set ring=true --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm c1cf0c693294 268009 --set warps=2 --set unroll=8 --set ring=true --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm 91d3aded9b42 268009 --set warps=2 --set unroll=6 --set ring=true --set max_cluster=4 --set ctas_target=528"
  # the ring on 4 warps, 2-CTA split
  "skinny_gemm 1a29f0294e37 268009 --set warps=4 --set unroll=6 --set ring=true --set max_cluster=2 --set ctas_target=528"
  # the chunked loop with xpre (128 registers: 8 CTAs of 2 warps a SM), no cluster and a 2-CTA split
  "skinny_gemm 26e7eff821d6 268009 --set warps=2 --set unroll=6 --set max_cluster=1"
  "skinny_gemm 67898333c100 268009 --set warps=2 --set unroll=6 --set max_cluster=2 --set ctas_target=528"
  # 32 rows a CTA (x read once per 32 weight rows), 2 warps, 2-CTA split: chunked and ring
  "skinny_gemm 8c1a6016b1d0 268009 --set m_tiles=2 --set warps=2 --set unroll=4 --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm 1b1c65b84ebd 268009 --set m_tiles=2 --set warps=2 --set unroll=4 --set ring=true --set max_cluster=2 --set ctas_target=528"
  # bulk: every weight byte of a warp's slice requested at once (row copies; TMA boxes), 4 and 2 warps
  "skinny_gemm 29d230a03688 268009 --set warps=4 --set bulk=true --set max_cluster=1"
  "skinny_gemm 9ebf338596d1 268009 --set warps=4 --set bulk=true --set tma=true --set max_cluster=1"
  "skinny_gemm 540bbda270bc 268009 --set warps=2 --set bulk=true --set max_cluster=2 --set ctas_target=528"
)
