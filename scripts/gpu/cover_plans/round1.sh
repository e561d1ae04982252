# shellcheck shell=bash disable=SC2034
# cover_gemms.sh plan, round 1 (sessions 47-51): the GEMMs no promoted kernel ran after session 46.
# skinny_gemm at the ten per-rank shapes outside 268009's and c8b7a7's scopes, B 1..8 (the base's),
# TP 8/16 (docs/HISTORY.md, session 47); gemm_situ_and_mul at dense_gate_up (session 48).
# Run on an H100 in session 51 (results/h100/session51): six candidates were promoted from it.
#
# RENDERS: "op id base render_variant.py-args": cover_gemms.sh render passes --scope shapes=[the op's
# shapes below] and checks that the render's id is the listed one (a different id means a template
# changed: re-render and update the ids).
SKINNY_SHAPES=kda_in_proj,kda_f_b,kda_o_proj,mla_q_b,mla_g_proj,mla_o_proj,shared_gate_up,shared_down,dense_gate_up,dense_down
SKINNY_EXCLUDE=shared_gate_up          # the fused gemm_situ_and_mul runs there
SITU_SHAPES=dense_gate_up
RENDERS=(
  # 268009's params; max_cluster 4; 268009's ALT plan as the main plan (w4 u8 t396 cl8 ring)
  "skinny_gemm ee9e383345ca 268009"
  "skinny_gemm 714b8ad29be3 268009 --set max_cluster=4"
  "skinny_gemm aa998eebb59c 268009 --set max_cluster=8 --set ring=true --set warps=4 --set unroll=8 --set ctas_target=396"
  # c8b7a7's 16-warp plan for all ten: outside the space, a study (pick_winner never proposes it)
  "skinny_gemm a4310c441db5 268009 --outside-space --set alt_shapes=$SKINNY_SHAPES --set alt_warps=16 --set alt_unroll=6 --set alt_ctas_target=396 --set alt_max_cluster=1 --set alt_ring=false"
  # 497382's params (w2 u4 t528 cl8 ring bulk tma); no cluster (w8 u8 t264); 497382's ALT plan (w4 u8 t264 cl4 ring bulk tma)
  "gemm_situ_and_mul 8a451464ad6f 497382"
  "gemm_situ_and_mul f2a104e5af12 497382 --set max_cluster=1 --set warps=8 --set unroll=8 --set ring=false --set bulk=false --set tma=false --set ctas_target=264"
  "gemm_situ_and_mul ce2ec19d6e81 497382 --set warps=4 --set unroll=8 --set ctas_target=264 --set max_cluster=4 --set ring=true"
)
