# Session 36, device call 4: A/A probe of the loop's interleaved timing
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 250 python3 scripts/gpu/aa_probe.py --op skinny_gemm --candidate c8b7a7 --shape mla_qkv_a --batches 1,8 > "$OUT/aa_skinny.log" 2>&1; echo rc=$?
timeout 150 python3 scripts/gpu/aa_probe.py --op moe_router --candidate 876e93 --batches 1,8 > "$OUT/aa_router.log" 2>&1; echo rc=$?
grep median "$OUT"/aa_*.log
