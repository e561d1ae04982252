#!/usr/bin/env bash
# Session 40, device call 4: the perf gate alone on attn_res 6f681825bd0a (gramhybrid at 7 x 128 for
# both plans), the incumbent 6041ff interleaved at every point; run under at_head.sh (HEAD with history).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
PHASE=perf timeout 500 bash scripts/gpu/regate.sh attn_res/6f681825bd0a
cat "$OUT/regate_perf.txt" 2>/dev/null
