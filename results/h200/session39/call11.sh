#!/usr/bin/env bash
# Session 39, device call 11: diag_probe's GPU test after the change that records a variant which cannot
# compile (and leaves it out of the timing) and rewrites the record after every point.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_diag_probe.py > "$OUT/pytest_diag_probe.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest_diag_probe.log"
