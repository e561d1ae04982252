# Session 36, device call 2 (carry [".device"], tree slimmed): the per-layer on/off tables with all
# eight promoted kernels (skinny_gemm c8b7a7 for mla_qkv_a beside 268009), TP8 and TP16, context 1024.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
for c in k3-tp8-rank k3-tp16-rank; do
  step "bench_layers_$c" 270 python3 scripts/gpu/bench_layers.py --config "$c" --kernels both --layers 4 --iters 10
  ls "$OUT"
done
