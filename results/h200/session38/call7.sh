# Session 38, device call 7: the A/A probe (one kernel.py loaded twice, the loop's timing) on
# attn_res 6041ff (nb8) and kda_decode 7eee43 (fp32 state) at B = 1 and 64, completing calls 1-2's.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 150 python3 scripts/gpu/aa_probe.py --op attn_res --candidate 6041ff --shape nb8 --batches 1,64 > "$OUT/aa_attnres38.log" 2>&1; echo "attn_res rc=$?"
timeout 150 python3 scripts/gpu/aa_probe.py --op kda_decode --candidate 7eee43 --state-dtype fp32 --batches 1,64 > "$OUT/aa_kda38.log" 2>&1; echo "kda rc=$?"
grep -h "median" "$OUT"/aa_*38.log
