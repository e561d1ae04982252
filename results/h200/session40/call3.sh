#!/usr/bin/env bash
# Session 40, device call 3: attn_res at B = 16..64 once the small plan runs 7 CTAs x 128 threads (call 2:
# 0.87-0.98 of 6041ff at every NB for B <= 32). What B = 64 should run: 6041ff's LARGE (2 x 448, two
# rounds; also ar_c7's), the 7 x 128 small plan (large_min_nb 9: never LARGE), LARGE at 7 x 128 or at
# 4 x 224.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
V=diag40/ar_base,diag40/ar_c7,diag40/ar_c7all,diag40/ar_c7L7,diag40/ar_c7L4
for nb in nb8 nb4 nb1 nb2 nb3 nb5 nb6 nb7; do
  timeout 80 python3 scripts/gpu/diag_probe.py --op attn_res --shape $nb --tp 8 --batches 16,32,64 \
    --kernels $V > "$OUT/diag_ar_$nb.log" 2>&1; echo "$nb rc=$?"
done
for nb in 1 2 3 4 5 6 7 8; do echo "== nb$nb"; grep -h "B=\|rror" "$OUT/diag_ar_nb$nb.log"; done
