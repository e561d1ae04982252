#!/usr/bin/env bash
# Session 39, device call 6: where kda_decode 7eee43's persistent kernel spends its time (bf16 768 tiles
# at 1.36x its floor, fp32 384 tiles at 1.28-1.30x). Diagnostics of its KdaPersist (wrong answers):
# nodelta = the delta rule's sums and update cut (state read from shared memory and stored as read),
# nostore = no state store, noconv = no conv_state store, stream = all three (the cp.async pipeline,
# the small math and o's store).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
K=diag39/k_base,diag39/k_nodelta,diag39/k_nostore,diag39/k_noconv,diag39/k_stream
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype bf16 --tp 8 --batches 64 --kernels $K \
  > "$OUT/diag_kda_bf16_tp8.log" 2>&1; echo "bf16 tp8 rc=$?"
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 8 --batches 32,64 --kernels $K \
  > "$OUT/diag_kda_fp32_tp8.log" 2>&1; echo "fp32 tp8 rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 16 --batches 64 --kernels $K \
  > "$OUT/diag_kda_fp32_tp16.log" 2>&1; echo "fp32 tp16 rc=$?"
grep -h "B=" "$OUT"/diag_kda_*.log
