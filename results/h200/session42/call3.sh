#!/usr/bin/env bash
# Session 42, device call 3 (carry [".device"], tree slimmed): the per-layer on/off tables that still
# timed attn_res 6041ff, re-run with the eight promoted kernels (attn_res 6f6818): k3-tp16-rank at
# context 1024 and 32768, k3-tp8-rank at 8192 and 32768 (call 1 re-ran k3-tp8-rank at 1024).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_layers_k3-tp16-rank 150 python3 scripts/gpu/bench_layers.py --config k3-tp16-rank --kernels both --layers 4 --iters 10
step bench_layers_k3-tp8-rank_ctx8192 140 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --context 8192 --kernels both --layers 4 --iters 10
step bench_layers_k3-tp8-rank_ctx32768 140 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --context 32768 --kernels both --layers 4 --iters 10
step bench_layers_k3-tp16-rank_ctx32768 140 python3 scripts/gpu/bench_layers.py --config k3-tp16-rank --context 32768 --kernels both --layers 4 --iters 10
ls "$OUT"
