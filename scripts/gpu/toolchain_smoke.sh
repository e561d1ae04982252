#!/usr/bin/env bash
# H200 proof of the toolchain (issue 4): evaluate the promoted moe_router candidate end
# to end with `harness eval`, then run the GPU-marked toolchain tests (wrong-answer and
# illegal-address kernels classified, worker replaced, canary, next good candidate correct).
# Run from the checkout root on the GPU machine:
#   source .device/cutedsl/setup.sh && OUT=/tmp/out bash scripts/gpu/toolchain_smoke.sh
# Writes $OUT/eval_moe_router.json, $OUT/eval_moe_router.txt, $OUT/gpu_tests.txt, $OUT/summary.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/toolchain-smoke}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HARNESS_CACHE="$OUT/cache"
CAND=${CAND:-$(python3 -c "
from harness.agent.stages import promoted_candidate
print(promoted_candidate('moe_router').id)")}
echo "candidate: $CAND"
python3 -m harness.cli eval moe_router "$CAND" --batch 1,8,64 --tp 8 2>&1 | tee "$OUT/eval_moe_router.txt"
eval_rc=${PIPESTATUS[0]}
python3 -m pytest -q -m gpu tests/toolchain -p no:cacheprovider > "$OUT/gpu_tests.txt" 2>&1
tests_rc=$?
tail -20 "$OUT/gpu_tests.txt"
python3 - "$OUT" "$eval_rc" "$tests_rc" <<'PY'
import json, sys
out, eval_rc, tests_rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
json.dump({"eval_rc": eval_rc, "gpu_tests_rc": tests_rc}, open(f"{out}/summary.json", "w"), indent=1)
PY
exit $(( eval_rc != 0 || tests_rc != 0 ))
