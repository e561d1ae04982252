#!/usr/bin/env bash
# Session 39, device call 2: call 1 found the B-growth of the swap-AB GEMMs is x's L2 traffic (every
# 16-row CTA reads all of x). XMC variants (diag39/*_xmc*, later results/h200/session39/variants/):
# the small kernel keeps x in shared memory, and each warp's K slice of x is copied once per cluster of
# XMC = 2 or 4 adjacent row-block CTAs by a multicast cp.async.bulk (x's L2 reads / XMC).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape mla_qkv_a --tp 8 --batches 1,2,4,8 \
  --kernels diag39/mla_base,diag39/mla_xmc,diag39/mla_xmc4 > "$OUT/diag_mla2.log" 2>&1; echo "mla rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_down --tp 8 --batches 1,4,8 \
  --kernels diag39/lat_base,diag39/lat_xmc,diag39/lat_xmc4 > "$OUT/diag_latd2.log" 2>&1; echo "latent_down rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_up --tp 8 --batches 1,8 \
  --kernels diag39/lat_base,diag39/lat_xmc,diag39/lat_xmc4 > "$OUT/diag_latu2.log" 2>&1; echo "latent_up rc=$?"
grep -h "B=" "$OUT"/diag_*2.log; tail -3 "$OUT"/diag_*2.log | grep -i error
