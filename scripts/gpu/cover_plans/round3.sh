# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 3 (session 55): the B=8 points where a promoted kernel misses the 1.05x
# cuBLAS bar on the H200 (results/h200/session54/bench_promoted_skinny.json.xz). Two of them are one
# GEMM (K 768, N 7168: copy 4.47 us, cuBLAS 5.44):
#   shared_down TP8, 91b17e: 5.26 us at B=8 (1.034x);
#   kda_o_proj = mla_o_proj TP16, a87a4d: 5.38 us at B=8 (1.009x).
# (kda_in_proj TP8, a3da8b at 1.044x, is left out: 23.97 us against a 23.45 us copy.)
# Both run 268009's 8 warps, chunked on 4-CTA clusters. Session 54's "bulk" renders (each warp asks
# for its whole weight slice at once) won 1.06-1.30x over cuBLAS at B 1 and 8 on the TP8 o_proj
# shapes (K 1536); these try them, and their 2- and 8-warp and 2-CTA-split neighbours, at K 768.
# A winner must beat the promoted kernel there by the perf gate's 5% (geometric mean over its
# scope's points), not cuBLAS: so bench times 91b17e and a87a4d beside the renders (SKINNY_ALSO),
# propose / gate refuse this plan, and a winner is narrowed to its shapes, TP and batches by hand
# (`harness narrow`) and gated with regate.sh.
SKINNY_SHAPES=shared_down,kda_o_proj,mla_o_proj
SKINNY_SKIP=shared_down@16,kda_o_proj@8,mla_o_proj@8,mla_o_proj@16   # mla_o_proj@16 = kda_o_proj@16
SKINNY_EXCLUDE=$SKINNY_SKIP
SKINNY_BATCHES=1,2,4,5,8
SKINNY_ALSO=(91b17e39677d a87a4d18c8bc)
RENDERS=(
  # 9ebf33 and 29d230's params (TMA boxes / row copies, 4 warps, no cluster): session 54's winners
  "skinny_gemm 077e99b288ec 268009 --set warps=4 --set bulk=true --set tma=true --set max_cluster=1"
  "skinny_gemm bb11c97f5b0f 268009 --set warps=4 --set bulk=true --set max_cluster=1"
  # 2 and 8 warps a CTA, no cluster
  "skinny_gemm 66c659026233 268009 --set warps=2 --set bulk=true --set tma=true --set max_cluster=1"
  "skinny_gemm 3c72a95a69e5 268009 --set warps=8 --set bulk=true --set tma=true --set max_cluster=1"
  "skinny_gemm d8479109f73f 268009 --set warps=8 --set bulk=true --set max_cluster=1"
  # 2-CTA K splits (896 CTAs): 540bb's params, and with TMA on 2, 4 and 8 warps
  "skinny_gemm accbe3c7b408 268009 --set warps=2 --set bulk=true --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm 6d57ca47ad2c 268009 --set warps=2 --set bulk=true --set tma=true --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm 2c95a53c019b 268009 --set warps=4 --set bulk=true --set tma=true --set max_cluster=2 --set ctas_target=528"
  "skinny_gemm 762c87094c4f 268009 --set warps=8 --set bulk=true --set tma=true --set max_cluster=2 --set ctas_target=528"
)
