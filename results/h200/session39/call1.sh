#!/usr/bin/env bash
# Session 39, device call 1: where the swap-AB GEMMs' time grows with B (mla_qkv_a c8b7a7 9.26 us
# at B=1, 9.70 at B=8; latent 268009 +0.4 us). Diagnostic variants of the promoted kernel.py
# (diag39/, later results/h200/session39/variants/): x0 = every lane reads token 0's x (B=1's x
# traffic, wrong answers), nox = no x loads, stagger = each CTA starts its K blocks at bn % KB (correct);
# the swapab_xs candidates (x staged in shared memory) for context; ncu memory sections at B=1, 8.
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
S=kernels_generated/skinny_gemm
timeout 200 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape mla_qkv_a --tp 8 --batches 1,2,4,8 \
  --kernels diag39/mla_base,diag39/mla_x0,diag39/mla_nox,diag39/mla_stagger,$S/aadb176e313b,$S/ddbaa80d9889,$S/ee6141359fd7 \
  > "$OUT/diag_mla.log" 2>&1; echo "mla rc=$?"
timeout 150 python3 scripts/gpu/diag_probe.py --op skinny_gemm --shape latent_down --tp 8 --batches 1,8 \
  --kernels diag39/lat_base,diag39/lat_x0,diag39/lat_nox,diag39/lat_stagger > "$OUT/diag_lat.log" 2>&1; echo "lat rc=$?"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
for b in 1 8; do
  timeout 120 "$NCU" --target-processes all -k "regex:SkinnyGemm" --launch-skip 1 --launch-count 1 --cache-control all \
    --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    python3 scripts/gpu/run_once.py skinny_gemm c8b7a7 --shape mla_qkv_a --batch $b --calls 2 > "$OUT/ncu_mla_b$b.txt" 2>&1
  echo "ncu b$b rc=$?"
done
grep -h "x1\.\|x0\.\|B=" "$OUT"/diag_*.log | head -60
