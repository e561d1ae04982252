#!/usr/bin/env bash
# Session 39, device call 9: (1) the new GPU test of diag_probe (a kernel against its own copy reads 1);
# (2) ncu PC sampling of kda 7eee43's persistent kernel at bf16 TP8 B=64 (768 tiles), to see what its
# state stores hold up (calls 6-8).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_diag_probe.py > "$OUT/pytest_diag_probe.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest_diag_probe.log"
mkdir -p /tmp/prof
OUT=/tmp/prof timeout 300 bash scripts/gpu/profile_source.sh kda_decode 7eee43 KdaPersist kda_b64_bf16 --batch 64 --state-dtype bf16 \
  > "$OUT/profile.log" 2>&1; echo "profile rc=$?"
cp /tmp/prof/kda_b64_bf16.tar.xz "$OUT/" 2>/dev/null; tail -5 "$OUT/profile.log"
