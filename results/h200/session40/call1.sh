#!/usr/bin/env bash
# Session 40, device call 1: (a) diag_probe's GPU test after edc8fea (each variant compiled once, not
# once per batch), never run on a GPU; (b) attn_res's small plan over larger clusters: 6041ff (4 CTAs
# x 224 threads) beside 8 x 128, 14 x 64 (exact: 64 vectors a CTA), 16 x 64 (non-portable cluster
# size; cuTe DSL allows it on every kernel it loads) and 16 x 64 with one Gram round up to nb8.
# Variants are renders of prompts/kernels/attn_res/gramhybrid.py.j2 with Plan.check widened to 1..16
# (scratch folders diag40/, kept in variants.tar.xz).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_diag_probe.py > "$OUT/pytest_diag_probe.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest_diag_probe.log"
V=diag40/ar_base,diag40/ar_c8,diag40/ar_c14,diag40/ar_c16,diag40/ar_c16r1
for spec in nb8:1,2,4,8,16 nb4:1,2,4,8,16 nb6:1,8; do
  nb=${spec%%:*}; bs=${spec#*:}
  timeout 130 python3 scripts/gpu/diag_probe.py --op attn_res --shape $nb --tp 8 --batches $bs \
    --kernels $V > "$OUT/diag_ar_$nb.log" 2>&1; echo "$nb rc=$?"
done
grep -h "B=\|rror" "$OUT"/diag_ar_*.log
