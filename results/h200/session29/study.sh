# Session 29, device call 1: ran once at 324111d from that tree (then scripts/gpu/session29_study.sh, carry
# [".device", ".whl"], after `bash scripts/gpu/slim_tree.sh on`). Kept as the record of the run: dadec7 and
# the skinny variants it names are gone since f8fdf84 (re-render them from a12e47d to run it again).
# 1. GPU tests: the mma_hybrid family (new: dadec7, topk_wait=flag) and the gemm_situ test
#    session 27 did not reach. 2. moe_router dadec7 against the promoted 876e93 over its scope,
#    alone and after attn_res (bench_chain). 3. skinny_gemm mla_qkv_a ALT-plan sweep (scratch
#    renders of fcb21b, untracked).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_router_flag 150 python3 scripts/gpu/bench_kernels.py --ops moe_router --tps 8 --rounds 7 \
  --candidates 876e93,dadec7 --no-compile-baseline --step-deadline-s 120
step bench_chain_flag 100 python3 scripts/gpu/bench_chain.py --routers 876e93,dadec7 --batches 1,8,16,32,64 --rounds 10
step gpu_tests 220 python3 -m pytest -q -m gpu tests/kernels/test_moe_router_hybrid.py tests/kernels/test_gemm_situ_emulation.py \
  tests/gates/test_layer_ab.py tests/toolchain/test_cli_and_gpu.py tests/toolchain/test_timing.py
step bench_skinny_alt_sweep 120 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes mla_qkv_a --rounds 5 --candidates fcb21b,569aa1,9f31dd,a96bbe,77339f,d4cf58,1234a0,e1e775 \
  --no-compile-baseline --no-eager --step-deadline-s 120
