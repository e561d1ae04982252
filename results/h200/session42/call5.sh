#!/usr/bin/env bash
# Session 42, device call 5 (carry [".device"], tree slimmed): where moe_router 876e93's time goes past a
# copy of its weights (8.75 us at B=1 against a 4.83 us copy). Diagnostic variants of its kernel.py
# (scratch diag42r/, kept in variants_router.tar.xz), each with the same GEMM:
#   rt_base  876e93 unchanged;
#   rt_gemm  the GEMM alone (the top-k grid never launched);
#   rt_wait  top-k grid launched (PDL), loads its bias, waits on the GEMM grid, writes; reads no partial;
#   rt_load  + reads and sums the partial logits, sigmoid, bias, ordered keys; no selection;
#   rt_p1    + phase 1 (each warp's top-16 by 16 redux/ballot rounds); phase 2 and the renormalization skipped.
# Only rt_base is correct; diag_probe times every variant anyway. Two passes, B 1-64.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
K=diag42r/rt_base,diag42r/rt_gemm,diag42r/rt_wait,diag42r/rt_load,diag42r/rt_p1
for p in 1 2; do
  mkdir -p "$OUT/p$p"
  OUT="$OUT/p$p" step diag_router 200 python3 scripts/gpu/diag_probe.py --op moe_router --tp 8 --batches 1,2,8,16,32,64 --kernels $K
  grep -h "B=\|rror" "$OUT/p$p/diag_router.log"
done
