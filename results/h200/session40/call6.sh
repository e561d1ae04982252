#!/usr/bin/env bash
# Session 40, device call 6: attn_res's scorecard rows for the promoted 6f6818 beside 6041ff, every
# point of the scope, the flags of session 38's small-ops run (cold: 4096 rotated sets, eager 64).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
timeout 400 python3 scripts/gpu/bench_kernels.py --rounds 5 --max-copies 4096 --eager-copies 64 --step-deadline-s 120 \
  --ops attn_res --tps 8,16 --batches 1,2,4,8,16,32,64 --shapes all --candidates 6041ff,6f6818 > "$OUT/bench_ar40.log" 2>&1
echo "bench rc=$?"; tail -5 "$OUT/bench_ar40.log"
mv "$OUT/bench_kernels_attn_res.json" "$OUT/bench_ar40.json" 2>/dev/null; ls "$OUT"
