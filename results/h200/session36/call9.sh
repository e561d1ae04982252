# Session 36, device call 9: the router's and gemm_situ's scorecard runs (session 32's commands)
# again under bench_kernels.py's new groups (eager and torch.compile apart from the kernels).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
B="python3 scripts/gpu/bench_kernels.py"
timeout 140 $B --ops moe_router --tps 8,16 --batches 1,2,4,8,16,32,64 --rounds 5 --candidates 876e93 > "$OUT/bench_router36.log" 2>&1; echo "router rc=$?"
mv "$OUT/bench_kernels_moe_router.json" "$OUT/bench_router36.json"
timeout 150 $B --ops gemm_situ_and_mul --tps 8,16 --batches 1,2,4,8 --shapes all --rounds 5 --candidates 497382 > "$OUT/bench_gemm36.log" 2>&1; echo "gemm rc=$?"
mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_gemm36.json"
ls "$OUT"
