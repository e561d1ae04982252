#!/usr/bin/env bash
# Session 40, device call 2: attn_res's small plan at 14 CTAs x 64 threads (call 1: 5-12% faster than
# 6041ff at B <= 8, even at B = 16) over every NB and B = 1..32, beside 7 x 128 (also exact), 14 x 32
# (two vectors a thread), 14 x 128 of 8-byte vectors, and 14 x 64 with b_switch 16 (B = 32 on LARGE).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
V=diag40/ar_base,diag40/ar_c14,diag40/ar_c7,diag40/ar_c14t32,diag40/ar_c14v4,diag40/ar_c14bs16
for nb in nb8 nb4 nb1 nb2 nb3 nb5 nb6 nb7; do
  timeout 90 python3 scripts/gpu/diag_probe.py --op attn_res --shape $nb --tp 8 --batches 1,2,4,8,16,32 \
    --kernels $V > "$OUT/diag_ar_$nb.log" 2>&1; echo "$nb rc=$?"
done
for nb in 1 2 3 4 5 6 7 8; do echo "== nb$nb"; grep -h "B=\|rror" "$OUT/diag_ar_nb$nb.log"; done
