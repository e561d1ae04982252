#!/usr/bin/env bash
# Session 43, device call 1 (carry [".device", ".whl"], tree slimmed).
# (a) The GPU tests touching bench_kernels / diag_probe, which changed after the last full GPU suite
#     (session 42 call 4 at 9ccf6ac): surface_launch_error and its new test
#     test_a_variant_whose_launch_fails_is_recorded_and_the_run_goes_on, never run on a GPU.
# (b) moe_router: the K splits summed in a thread-block cluster before the top-k (template knobs
#     cluster_reduce / rs_cluster_reduce), alone and with session 42's bitonic phase 1 and 120 KiB
#     top-k pad. Scratch folders diag43/ (kept in variants_router43.tar.xz):
#       rt_base 876e93; rt_base_pad 876e93 + pad (session 42's rt_pad);
#       cr  876e93 + both knobs (0b1e46); crs small path only (7a85ce); crl large path only (b69d06);
#       cr_pad cr + pad; crbt cr + topk_sort=bitonic (79fadc); crbt_pad crbt + pad.
#     Two passes, TP8, B 1-64 (the router is replicated: TP16 runs the same kernels).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
K=diag43/rt_base,diag43/rt_base_pad,diag43/cr,diag43/crs,diag43/crl,diag43/cr_pad,diag43/crbt,diag43/crbt_pad
mkdir -p "$OUT/p1" "$OUT/p2"
OUT="$OUT/p1" step diag_router 200 python3 scripts/gpu/diag_probe.py --op moe_router --tp 8 --batches 1,2,4,8,16,32,64 --kernels $K
grep -h "B=\|rror" "$OUT/p1/diag_router.log" | cut -c1-120
echo "== $(date -u +%T) gpu tests (subset)"
JOBS=4 DEADLINE_S=200 PACK=1 timeout 230 bash scripts/gpu/gpu_tests.sh tests/test_diag_probe.py tests/kernels/test_bench_points.py \
  tests/test_group_probe.py tests/test_diag_summary.py tests/test_compare_runs.py tests/test_scorecard.py > "$OUT/gpu_tests.log" 2>&1
echo "   rc=$? $(tail -3 "$OUT/gpu_tests.log")"
OUT="$OUT/p2" step diag_router 200 python3 scripts/gpu/diag_probe.py --op moe_router --tp 8 --batches 1,2,4,8,16,32,64 --kernels $K
grep -h "B=\|rror" "$OUT/p2/diag_router.log" | cut -c1-120
