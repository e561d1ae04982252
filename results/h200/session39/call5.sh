#!/usr/bin/env bash
# Session 39, device call 5: where attn_res 6041ff's small plan (a row over a 4-CTA cluster) spends its
# time. Diagnostics (wrong answers): nogram = the Gram and w_res dot products cut to one product each
# (the same values pushed), nopush = each CTA reduces only its own partials (a CTA barrier instead of
# the cluster's st.async pushes and mbarrier waits).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
for nb in nb8 nb4; do
  timeout 200 python3 scripts/gpu/diag_probe.py --op attn_res --shape $nb --tp 8 --batches 1,8,32 \
    --kernels diag39/ar_base,diag39/ar_nogram,diag39/ar_nopush > "$OUT/diag_ar_$nb.log" 2>&1; echo "$nb rc=$?"
done
grep -h "B=" "$OUT"/diag_ar_*.log
