# Session 36, device call 5: the loop's timing after the group split (gpu_eval.time_point) and
# bench_kernels.py's new groups on skinny_gemm (eager, torch.compile and cuBLAS on).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step eval_vs_promoted_split 200 python3 -m harness.cli eval skinny_gemm 7b9dd5 --batch 1,8 --tp 8 \
  --shape mla_qkv_a,latent_down --vs promoted
step bench_sk36b 240 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes mla_qkv_a,latent_down --rounds 5 --candidates c8b7a7,268009 --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk36b.json"
grep -A12 "correctness and timing" "$OUT/eval_vs_promoted_split.log" | cut -c1-240
