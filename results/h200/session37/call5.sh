# session 37, call 5: scripts/gpu/group_probe.py: torch.compile against our kernel in one group,
# in two, and A/A, at the points where session 37's split groups read compile faster.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 250 python3 scripts/gpu/group_probe.py --op situ_and_mul --candidate 59ea06 --batches 1,2,64 > "$OUT/group_situ.log" 2>&1; echo "situ rc=$?"
timeout 150 python3 scripts/gpu/group_probe.py --op add_rmsnorm --candidate 48258d --batches 1,64 --repeats 2 > "$OUT/group_addnorm.log" 2>&1; echo "addnorm rc=$?"
grep median "$OUT"/group_*.log
