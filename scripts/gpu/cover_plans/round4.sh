# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 4 (session 66): the small-K GEMMs at B 16..64, where session 66's midpipe
# replacements run 0.53-0.79x cuBLAS on the H100 (results/h100/session66/README.md):
#   shared_down TP8 and kda_o_proj = mla_o_proj TP16 (K 768, N 7168): 01f8c3, 2f5f13, 11.2 us at B=64
#     against cuBLAS's 6.8;
#   shared_down TP16 (K 384, N 7168): 59f8b8, 9.0 us against 4.8;
#   mla_q_b TP16 (K 1536, N 1152): 5242eb, 7.7 us against 5.3.
# Their pipe (lp_warps 4, lp_sblocks 2, lp_ctas 396, lp_cluster 8) gives a CTA 64 weight rows, so at N 7168
# 112 row tiles split K over 3-CTA clusters: 256 of K 768 a CTA, four 64-wide stages for a 3-stage ring.
# These renders of 2f5f13 (01f8c3's params too) make the K loop longer or the grid wider: 32-wide stages
# (lp_sblocks 1), 2-CTA splits, 2 warps a CTA (224 row tiles). Each compiles for sm_90a and sm_103a with no
# spills (lp_cluster 1 spills 16 bytes on sm_103a, lp_warps 2 alone 20 on sm_90a: left out).
# A winner must beat the promoted kernels there (SKINNY_ALSO), not cuBLAS alone, so it is narrowed by
# hand (`harness narrow`) and gated as a replacement, as in round 3.
SKINNY_SHAPES=shared_down,kda_o_proj,mla_o_proj,mla_q_b
SKINNY_SKIP=kda_o_proj@8,mla_o_proj@8,mla_o_proj@16,mla_q_b@8   # mla_o_proj@16 = kda_o_proj@16; ab4820 runs TP8's
SKINNY_EXCLUDE=$SKINNY_SKIP
SKINNY_BATCHES=16,32,64
SKINNY_ALSO=(2f5f13de67e1 01f8c367a0bd 59f8b866e4c0 5242eb3d9ff3)
RENDERS=(
  "skinny_gemm 3559859a5657 2f5f13 --set lp_sblocks=1 --scope tp=[8,16]"
  "skinny_gemm 076496adf0f0 2f5f13 --set lp_cluster=2 --scope tp=[8,16]"
  "skinny_gemm 8a2ebeb7c1a0 2f5f13 --set lp_cluster=2 --set lp_sblocks=1 --scope tp=[8,16]"
  "skinny_gemm 3c21dbbae23e 2f5f13 --set lp_warps=2 --set lp_sblocks=1 --scope tp=[8,16]"
)
