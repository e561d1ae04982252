# Session 38, device call 1: every op's table from one benchmark run with every column (eager,
# torch.compile into rotated outputs, ours, floor, copy): the small ops cold (4096 sets), eager on
# 64 sets of its own (--eager-copies); the router, gemm_situ and skinny_gemm under the same flags
# (their weights leave L2 at a few sets). Then the A/A probe at situ_and_mul's L2-resident points.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
B="python3 scripts/gpu/bench_kernels.py --rounds 5 --max-copies 4096 --eager-copies 64 --step-deadline-s 120"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_all38_small 300 $B --ops kda_decode,add_rmsnorm,attn_res,situ_and_mul --tps 8,16 \
  --batches 1,2,4,8,16,32,64 --shapes all --state-dtypes fp32,bf16 --candidates 48258d,6041ff,7eee43,59ea06
mv "$OUT/bench_kernels_kda_decode-add_rmsnorm-attn_res-situ_and_mul.json" "$OUT/bench_all38_small.json"
step bench_all38_router 90 $B --ops moe_router --tps 8,16 --batches 1,2,4,8,16,32,64 --candidates 876e93
mv "$OUT/bench_kernels_moe_router.json" "$OUT/bench_all38_router.json"
step bench_all38_gemm 100 $B --ops gemm_situ_and_mul --tps 8,16 --batches 1,2,4,8 --shapes shared_gate_up --candidates 497382
mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_all38_gemm.json"
step bench_all38_skinny 100 $B --ops skinny_gemm --tps 8,16 --batches 1,2,4,8 --shapes latent_down,latent_up,mla_qkv_a \
  --candidates 268009,c8b7a7
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_all38_skinny.json"
ls "$OUT"
step aa_situ38 80 python3 scripts/gpu/aa_probe.py --op situ_and_mul --candidate 59ea06 --batches 1,2,8,64
