#!/usr/bin/env bash
# kda variants of the promoted 7eee43 prepared in session 20 after the device time ran out (compiled
# on the CPU, no spills, unmeasured). Rendered as untracked scratch candidates through
# scripts/render_variant.py; run from the checkout's root before the device call (slim_tree.sh on
# leaves untracked candidates in place). Prints one id per line.
#   8dd8df: fp32 96 tiles on the persistent kernel (fp32_small_hi 48): with the row interleave a
#           persistent round measured ~5.0 us (192 -> 384 -> 768 tiles: 11.0 / 16.3 / 30.0 us), so
#           one round plus ~0.6 us might beat the small fused plan's 6.97 us at 96 tiles.
#   c45e24: the fp32 persistent kernel with one stage (no prefetch ahead) and 2 CTAs an SM at 8 warps:
#           at 192 tiles every CTA runs one tile (264 CTAs) where 132 two-stage CTAs run 2 on 60 of
#           them and 1 on 72 (11.0 us against a floor + launch of 7.8).
#   bde637: both.
set -euo pipefail
R="python3 scripts/render_variant.py kda_decode 7eee43"
$R --set fp32_small_hi=48                                                                 # 8dd8df
$R --set fp32_stages=1 --set fp32_ctas_per_sm=2 --set fp32_warps=8                        # c45e24
$R --set fp32_stages=1 --set fp32_ctas_per_sm=2 --set fp32_warps=8 --set fp32_small_hi=48 # bde637
