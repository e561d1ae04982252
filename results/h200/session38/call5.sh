# session 38, call 5: the GPU test suite at HEAD (bench_kernels --eager-copies, the scorecard eager mark).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
JOBS=10 DEADLINE_S=470 PACK=1 timeout 540 bash scripts/gpu/gpu_tests.sh
