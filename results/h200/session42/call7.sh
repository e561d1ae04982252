#!/usr/bin/env bash
# Session 42, device call 7 (carry [".device"], tree slimmed): two questions about moe_router 876e93's
# top-k tail (scratch diag42b/, kept in variants_router7.tar.xz).
# (a) Does it pay to read fewer partial logits? rt_1split = 876e93 summing partial 0 alone (wrong
#     answers, timed anyway); rt_load / rt_load1 = call 5's rt_load reading 8 / 1 partials.
# (b) Why did the bitonic phase 1 (bt = 1c5dd5) slow down at B = 2-16? Guess: the top-k CTAs, launched
#     early by PDL while the GEMM runs, pack several to an SM and the longer network is issue-bound.
#     rt_pad / bt_pad add 120 KiB of unused shared memory to the top-k CTA (one an SM); rt_padx asks
#     240 KiB, more than an SM has, so it must fail to launch (proof the pad is counted).
# As run: the first device attempt got no machine; the second (one pass, B 1, 8, 16, 64) ended at
# rt_padx's failed launch (CuTe printed the error without raising, torch raised at its next call:
# call7/diag_router_padx_attempt.log), so the third ran without rt_padx. The pad's effect below is
# the evidence that it counts.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
K=diag42b/rt_base,diag42b/rt_1split,diag42b/rt_load,diag42b/rt_load1,diag42b/rt_pad,diag42b/bt,diag42b/bt_pad
for p in 1; do
  mkdir -p "$OUT/p$p"
  OUT="$OUT/p$p" step diag_router 150 python3 scripts/gpu/diag_probe.py --op moe_router --tp 8 --batches 1,8,16,64 --kernels $K
  grep -h "B=\|rror" "$OUT/p$p/diag_router.log" | cut -c1-160
done
