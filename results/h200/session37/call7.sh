# session 37, call 7: the GPU test suite at HEAD (gpu_eval.compiled_reference in the loop's worker).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
JOBS=10 DEADLINE_S=470 PACK=1 timeout 540 bash scripts/gpu/gpu_tests.sh
