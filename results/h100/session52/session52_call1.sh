#!/usr/bin/env bash
# Session 52, device call 1 (carry [".device"], tree slimmed): the first benchmark run that times all
# sixteen promoted kernels' GEMMs. skinny_gemm: its nine promoted kernels at the eleven shapes they cover,
# TP8 and TP16, B 1, 2, 4, 8 (their scope), beside eager, torch.compile and cuBLAS; gemm_situ_and_mul:
# 497382 (shared_gate_up) and 16be30 (dense_gate_up, TP16) beside cuBLAS + the promoted situ_and_mul.
# Same flags as session 38's every-op run (results/h200/session38/call1.sh).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
B="python3 scripts/gpu/bench_kernels.py --rounds 5 --max-copies 4096 --eager-copies 64 --step-deadline-s 120"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench52_skinny 410 $B --ops skinny_gemm --tps 8,16 --batches 1,2,4,8 \
  --shapes latent_down,latent_up,mla_qkv_a,kda_f_b,mla_g_proj,shared_down,mla_q_b,kda_in_proj,dense_gate_up,kda_o_proj,mla_o_proj \
  --candidates 268009,c8b7a7,0afea8,7bbaa0,892ca1,91b17e,a3da8b,a87a4d,d1e959
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench52_skinny.json"
step bench52_gemm 120 $B --ops gemm_situ_and_mul --tps 8,16 --batches 1,2,4,8 --shapes shared_gate_up,dense_gate_up \
  --candidates 497382,16be30
mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench52_gemm.json"
ls "$OUT"
