#!/usr/bin/env bash
# Session 39, device call 12: halve (correct): kda 7eee43's persistent kernel with each group of ilp rows'
# sums reduced by one halving butterfly (attn_res's `lean` trick) instead of one butterfly a row: per
# group of 4 fp32 rows (tpr 32) 10 + 6 shuffles for S k and S q where 7eee43 issues 20 + 20; per 2 bf16
# rows (tpr 16) 6 + 4 for 8 + 8. halve_cs = the same with st.global.cs state stores (call 7: 1%).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
K=diag39/k_base,diag39/k_halve,diag39/k_halve_cs
timeout 150 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype bf16 --tp 8 --batches 64 --kernels $K \
  > "$OUT/diag_kda12_bf16_tp8.log" 2>&1; echo "bf16 tp8 rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 8 --batches 16,32,64 --kernels $K \
  > "$OUT/diag_kda12_fp32_tp8.log" 2>&1; echo "fp32 tp8 rc=$?"
timeout 100 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 16 --batches 64 --kernels $K \
  > "$OUT/diag_kda12_fp32_tp16.log" 2>&1; echo "fp32 tp16 rc=$?"
grep -h "B=" "$OUT"/diag_kda12_*.log
