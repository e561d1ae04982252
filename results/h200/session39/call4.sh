#!/usr/bin/env bash
# Session 39, device call 4: is the swap-AB GEMMs' B-growth the number of 128-byte lines an x load
# touches (8 at B=8 in fragment order) or its bytes? Diagnostics of the promoted kernel.py: x2 = two
# distinct tokens (2 lines), xline = token 0 read as 8 consecutive 64-byte pieces (the bytes of B=8 in
# 4 lines); and XT, a correct variant: x loaded line by line (4 lines an instruction) and put into
# fragment order through a per-warp shared buffer.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 200 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape mla_qkv_a --tp 8 --batches 1,2,4,8 \
  --kernels diag39/mla_base,diag39/mla_x0,diag39/mla_x2,diag39/mla_xline,diag39/mla_xt > "$OUT/diag_mla4.log" 2>&1; echo "mla rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_up --tp 8 --batches 1,8 \
  --kernels diag39/lat_base,diag39/lat_x0,diag39/lat_xline,diag39/lat_xt > "$OUT/diag_latu4.log" 2>&1; echo "latent_up rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_down --tp 8 --batches 1,8 \
  --kernels diag39/lat_base,diag39/lat_xt > "$OUT/diag_latd4.log" 2>&1; echo "latent_down rc=$?"
grep -h "B=" "$OUT"/diag_*4.log
