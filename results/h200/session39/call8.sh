#!/usr/bin/env bash
# Session 39, device call 8: call 7 found kda 7eee43's state stores cost by their instructions more than by
# their DRAM bytes (stores kept in L2: only 3-8% faster; no stores: 20-25%). TMA (correct): the persistent
# kernel writes the updated state into a shared buffer and one thread stores the tile by cp.async.bulk
# (its read of the buffer is awaited before the next tile writes it); fp32 then fits 2 stages, not 3.
# f32s2 = 7eee43 with 2 fp32 stages (what the fp32 plan gives up for the buffer).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
K=diag39/k_base,diag39/k_tma,diag39/k_f32s2
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype bf16 --tp 8 --batches 64 --kernels $K \
  > "$OUT/diag_kda8_bf16_tp8.log" 2>&1; echo "bf16 tp8 rc=$?"
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 8 --batches 16,32,64 --kernels $K \
  > "$OUT/diag_kda8_fp32_tp8.log" 2>&1; echo "fp32 tp8 rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 16 --batches 32,64 --kernels $K \
  > "$OUT/diag_kda8_fp32_tp16.log" 2>&1; echo "fp32 tp16 rc=$?"
grep -h "B=" "$OUT"/diag_kda8_*.log
