# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 6 (session 67): round 5's no-split pipe, further. Round 5 (results/h100/session67)
# found that 2f5f13's pipe without its split-K (lp_cluster 1: one CTA a 64-row tile over all of K, 112 CTAs at
# N 7168, as cuBLAS runs these GEMMs) on a 6- or 8-stage ring runs shared_down and kda_o_proj 15-50% faster
# than the promoted kernels at B 16..64, still 0.75-0.91x cuBLAS. These renders of 2f5f13 try, without a
# split: 128-wide stages (lp_sblocks 4, fewer ring waits a K), 2 warps a CTA (32 rows: 224 CTAs, two an SM,
# every SM busy; with 8 stages or 6 of 128-wide), and the cp.async twin (B 9..32) at 4 stages beside 8 for
# the lp_tma kernel. Session 68 gave each lp_minctas 2: without a launch bound ptxas (CUDA 13.0) allocates the
# 160-thread lp_tma kernel 72 registers on sm_103a, where two of session 67's renders spilled (2c19e8 12 bytes,
# d70f11 8); with it none spills on sm_103a (TP16, its four shapes), so a winner here can be committed as it
# is. Round 5's 8b768a (8 stages, no launch bound) runs again beside them: what the bound costs or buys on
# sm_90a, where ptxas gives 8b768a's lp_tma kernel 71 registers without it and 87 with it. 2f5f13's own is
# 68 without, 84 with, so 462a6e (2f5f13 with lp_minctas 2, its split kept) shows whether the promoted pipes
# would gain from it.
SKINNY_SHAPES=shared_down,kda_o_proj,mla_o_proj,mla_q_b
SKINNY_SKIP=kda_o_proj@8,mla_o_proj@8,mla_o_proj@16,mla_q_b@8   # mla_o_proj@16 = kda_o_proj@16; ab4820 runs TP8's
SKINNY_EXCLUDE=$SKINNY_SKIP
SKINNY_BATCHES=16,32,64
# cbf649, 63d5fe, 15dc3f: round 5's plan as committed points (63d5fe, 15dc3f with lp_minctas 2)
SKINNY_ALSO=(2f5f13de67e1 01f8c367a0bd 59f8b866e4c0 5242eb3d9ff3 cbf6499cf837 63d5fedd6ca2 15dc3f1420b7)
RENDERS=(
  "skinny_gemm 2d798126f953 2f5f13 --set lp_cluster=1 --set lp_stages=6 --set lp_sblocks=4 --set lp_minctas=2 --scope tp=[8,16]"
  "skinny_gemm 98df8a0c27f6 2f5f13 --set lp_cluster=1 --set lp_warps=2 --set lp_stages=8 --set lp_minctas=2 --scope tp=[8,16]"
  "skinny_gemm 65cc8becdbcb 2f5f13 --set lp_cluster=1 --set lp_warps=2 --set lp_stages=6 --set lp_sblocks=4 --set lp_minctas=2 --scope tp=[8,16]"
  "skinny_gemm 8f70367066d6 2f5f13 --set lp_cluster=1 --set lp_stages=8 --set lp_mid_stages=4 --set lp_minctas=2 --scope tp=[8,16]"
  "skinny_gemm 8b768acf164e 2f5f13 --set lp_cluster=1 --set lp_stages=8 --scope tp=[8,16]"
  "skinny_gemm 462a6e349625 2f5f13 --set lp_minctas=2 --scope tp=[8,16]"
)
