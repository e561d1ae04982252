#!/usr/bin/env bash
# Session 52, device call 2 (carry [".device"], tree slimmed): the per-layer on/off tables of
# k3-tp8-rank and k3-tp16-rank at 1K context, B 1, 8, 64, with the sixteen promoted kernels; then
# moe_router 876e93 on the same card (its table from one run).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_layers_k3-tp8-rank 160 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --kernels both --layers 4 --iters 10
tail -8 "$OUT/bench_layers_k3-tp8-rank.log"
step bench_layers_k3-tp16-rank 160 python3 scripts/gpu/bench_layers.py --config k3-tp16-rank --kernels both --layers 4 --iters 10
tail -8 "$OUT/bench_layers_k3-tp16-rank.log"
step bench52_router 90 python3 scripts/gpu/bench_kernels.py --rounds 5 --max-copies 4096 --eager-copies 64 --step-deadline-s 120 \
  --ops moe_router --tps 8,16 --batches 1,2,4,8,16,32,64 --candidates 876e93
mv "$OUT/bench_kernels_moe_router.json" "$OUT/bench52_router.json" 2>/dev/null
ls "$OUT"
