#!/usr/bin/env bash
# Session 39, device call 10: call 9's ncu of kda 7eee43's persistent kernel (bf16 TP8 B=64) puts 26% of the
# stall samples on FADDs waiting for shuffles (short_sb) and 14% on shared loads: the delta rule's per-row
# butterflies over tpr lanes (bf16 tpr 16: 4 steps x 2 sums x 8 rows a thread; fp32 tpr 32: 5 x 2 x 8).
# Fewer lanes a row means fewer, shorter chains: t8 = tpr 8 for both dtypes, t4 = tpr 4, t16f = fp32 tpr 16
# (correct variants; only PLANS changes).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
K=diag39/k_base,diag39/k_t8,diag39/k_t4,diag39/k_t16f
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype bf16 --tp 8 --batches 64 --kernels $K \
  > "$OUT/diag_kda10_bf16_tp8.log" 2>&1; echo "bf16 tp8 rc=$?"
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 8 --batches 16,32,64 --kernels $K \
  > "$OUT/diag_kda10_fp32_tp8.log" 2>&1; echo "fp32 tp8 rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 16 --batches 32,64 --kernels $K \
  > "$OUT/diag_kda10_fp32_tp16.log" 2>&1; echo "fp32 tp16 rc=$?"
grep -h "B=" "$OUT"/diag_kda10_*.log
