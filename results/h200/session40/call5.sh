#!/usr/bin/env bash
# Session 40, device call 5: every gate but perf on attn_res 6f681825bd0a (perf passed in call 4:
# geomean 1.085), then its GPU unit tests; run under at_head.sh, llguidance unpacked from .whl.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
PHASE=checks REGATE_JOBS=1 timeout 420 bash scripts/gpu/regate.sh attn_res/6f681825bd0a
cat "$OUT/regate_checks.txt" 2>/dev/null
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_attn_res_clustergram.py > "$OUT/pytest_ar_gpu.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest_ar_gpu.log"
