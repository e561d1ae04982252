# Session 34, device call 3 (carry [".device"], tree slimmed): gemm_situ_and_mul at TP16, where the promoted
# 497382 runs its ALT plan (4 warps on 4-CTA clusters) by cp.async.bulk at 1.29-1.33x its copy. Call 1's
# ALT variants kept bulk on (the main plan's `bulk` covers the ALT plan too), so these renders (untracked)
# turn bulk, alt_bulk and tma off and put wload=pf128nol1 on every weight load:
#   db31cc ALT as promoted (ring, unroll 8); a1f4bd ALT chunked, xpre, unroll 6; b45e7b + 8 warps;
#   653955 a1f4bd on 8-CTA clusters (528 CTAs target); 2745c0 8 warps on 8-CTA clusters; 6fa964 a1f4bd with pf128.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_gs16 240 python3 scripts/gpu/bench_kernels.py --ops gemm_situ_and_mul --tps 16 --batches 1,2,4,8 \
  --shapes shared_gate_up --rounds 5 --candidates 497382,db31cc,a1f4bd,b45e7b,653955,2745c0,6fa964 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_gs16.json"
python3 scripts/gpu/pick_winner.py "$OUT/bench_gs16.json" gemm_situ_and_mul 497382 > "$OUT/pick_gs16.txt" 2>&1
cat "$OUT/pick_gs16.txt"; ls "$OUT"
