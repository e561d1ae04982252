# session 37, call 1: session 32's cold run of the small ops again under session 36's timing
# groups (kernels apart from torch.compile), and a GPU check of session 36's mend (gpu_eval).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_cold37 330 python3 scripts/gpu/bench_kernels.py --ops kda_decode,add_rmsnorm,attn_res,situ_and_mul \
  --tps 8,16 --batches 1,2,4,8,16,32,64 --shapes all --state-dtypes fp32,bf16 --rounds 5 \
  --candidates 48258d,6041ff,7eee43,59ea06 --max-copies 4096 --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_kda_decode-add_rmsnorm-attn_res-situ_and_mul.json" "$OUT/bench_cold37.json"
ls "$OUT"
step eval_vs_promoted37 200 python3 -m harness.cli eval skinny_gemm 7b9dd5 --batch 1,8 --tp 8 \
  --shape mla_qkv_a,latent_down --vs promoted
grep -A12 "correctness and timing" "$OUT/eval_vs_promoted37.log" | cut -c1-240
