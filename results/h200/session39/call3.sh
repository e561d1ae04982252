#!/usr/bin/env bash
# Session 39, device call 3: call 2's XMC (x by multicast over 2 / 4-CTA clusters) was correct but slower at
# every B (+5.7% on mla_qkv_a at B=1 too), and its B-growth equalled the base's. XBULK keeps x in shared
# memory without a cluster: each warp bulk-copies its own K slice of x (one copy per token) before its
# first weight load, so x leaves the load/store path; does the B-growth (and the fixed cost) go?
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape mla_qkv_a --tp 8 --batches 1,2,4,8 \
  --kernels diag39/mla_base,diag39/mla_xbulk,diag39/mla_x0 > "$OUT/diag_mla3.log" 2>&1; echo "mla rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_up --tp 8 --batches 1,8 \
  --kernels diag39/lat_base,diag39/lat_xbulk > "$OUT/diag_latu3.log" 2>&1; echo "latent_up rc=$?"
grep -h "B=" "$OUT"/diag_*3.log
