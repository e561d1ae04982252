#!/usr/bin/env bash
# The six launch-bounded kda mid-plan variants of session 19, rendered as untracked scratch
# candidates (they spill 4-80 bytes, so they are not committed: tests/kernels/test_compile_candidates.py).
# Run from the checkout's root before the device call; the untracked folders travel with it
# (scripts/gpu/slim_tree.sh on leaves them in place). Prints one id per line.
set -euo pipefail
R="python3 scripts/render_variant.py kda_decode 8d9661 --set mid_v_split=2"
$R --set mid_min_ctas=3 --set fp32_mid_lo=96 --set fp32_mid_hi=192                              # e0b218
$R --set mid_min_ctas=3 --set fp32_mid_lo=96 --set fp32_mid_hi=384                              # ac20e9
$R --set mid_min_ctas=4 --set fp32_mid_lo=96 --set fp32_mid_hi=192                              # 08267e
$R --set mid_min_ctas=4 --set fp32_mid_lo=96 --set fp32_mid_hi=384 --set bf16_mid_hi=768        # 538e63
$R --set mid_min_ctas=3 --set fp32_small_hi=48 --set fp32_mid_lo=48 --set fp32_mid_hi=192        # b415d5
$R --set mid_min_ctas=3 --set fp32_mid_lo=96 --set fp32_mid_hi=192 --set bf16_small_hi=24 --set bf16_mid_lo=24   # be20aa
