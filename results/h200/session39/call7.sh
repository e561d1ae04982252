#!/usr/bin/env bash
# Session 39, device call 7: call 6 found the state store is 21-32% of kda 7eee43's persistent kernel.
# Is that its instructions or its DRAM bytes? st_l2 (diagnostic) stores every token's tile of a head
# into token 0's (the same store instructions, the bytes stay in L2); st_cs (correct) stores the state
# with st.global.cs (streaming: evict first).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
K=diag39/k_base,diag39/k_st_l2,diag39/k_st_cs,diag39/k_nostore
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype bf16 --tp 8 --batches 64 --kernels $K \
  > "$OUT/diag_kda7_bf16_tp8.log" 2>&1; echo "bf16 tp8 rc=$?"
timeout 200 python3 scripts/gpu/diag_probe.py --op kda_decode --state-dtype fp32 --tp 16 --batches 64 --kernels $K \
  > "$OUT/diag_kda7_fp32_tp16.log" 2>&1; echo "fp32 tp16 rc=$?"
grep -h "B=" "$OUT"/diag_kda7_*.log
