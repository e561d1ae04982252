# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 5 (session 67): the small-K GEMMs at B 16..64 again, after round 4 found no
# render faster than the promoted kernels there (results/h100/session67/README.md). ncu on an H100 in
# session 67: cuBLAS runs kda_o_proj TP16 (K 768, N 7168) without split-K, one 384-thread CTA (TMA + WGMMA)
# a 64-row tile over all of K, 92-112 CTAs in 4-CTA clusters; 2f5f13's 336 CTAs (3-CTA K splits of 64 rows)
# spend ~20-25% of their B=64 samples in the cluster reduction (cluster barrier waits, the release fence)
# and 21% waiting on the ring's mbarriers. These renders of 2f5f13 drop or halve the split and deepen the
# ring so a CTA keeps more bytes in flight: no cluster with 6 or 8 stages, 2-CTA splits with 6 stages,
# and 2f5f13's 3-CTA split on fewer CTAs (lp_ctas 264) with 6 stages.
SKINNY_SHAPES=shared_down,kda_o_proj,mla_o_proj,mla_q_b
SKINNY_SKIP=kda_o_proj@8,mla_o_proj@8,mla_o_proj@16,mla_q_b@8   # mla_o_proj@16 = kda_o_proj@16; ab4820 runs TP8's
SKINNY_EXCLUDE=$SKINNY_SKIP
SKINNY_BATCHES=16,32,64
SKINNY_ALSO=(2f5f13de67e1 01f8c367a0bd 59f8b866e4c0 5242eb3d9ff3)
RENDERS=(
  "skinny_gemm fba914a6c17c 2f5f13 --set lp_cluster=1 --set lp_stages=6 --scope tp=[8,16]"
  "skinny_gemm 8b768acf164e 2f5f13 --set lp_cluster=1 --set lp_stages=8 --scope tp=[8,16]"
  "skinny_gemm f3bb319301fe 2f5f13 --set lp_cluster=2 --set lp_stages=6 --set lp_ctas=264 --scope tp=[8,16]"
  "skinny_gemm 3f86bb83e0be 2f5f13 --set lp_ctas=264 --set lp_stages=6 --scope tp=[8,16]"
)
