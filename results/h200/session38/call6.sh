# Session 38, device call 6: add_rmsnorm's large plan (B > 32: one CTA a row) at other thread counts,
# cold. Variants of the promoted 48258d (untracked, re-made by
# `python scripts/render_variant.py add_rmsnorm 48258d --set large_threads=T`, T = 128 / 448 / 896:
# 887723 / cae1eb / 81a168). B=32 runs every variant's unchanged small plan: an A/A control.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 scripts/gpu/bench_kernels.py --ops add_rmsnorm --tps 8 --batches 32,64 --rounds 5 \
  --candidates 48258d,887723,cae1eb,81a168 --max-copies 4096 --no-eager --no-launch-floor --step-deadline-s 120 \
  > "$OUT/bench_addnorm_large38.log" 2>&1; echo "bench rc=$?"
mv "$OUT/bench_kernels_add_rmsnorm.json" "$OUT/bench_addnorm_large38.json"
grep -A6 "== add_rmsnorm" "$OUT/bench_addnorm_large38.log" | cut -c1-240
