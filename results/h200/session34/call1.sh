# Session 34, device call 1 (carry [".device"], tree slimmed): scratch renders (scripts/render_variant.py, untracked)
# 1. gemm_situ_and_mul 497382 against non-bulk plans with skinny's wload=pf128nol1 (+ xpre, unroll 6):
#    92979a ring+wload; 091ade w2 cl8; 288c0c w4 cl4 t528; a48e71 w8 cl2 t264; 23d266 w8 cl4 t528;
#    ed2c0f w4 cl2 t264; 4686a0 w2 cl4 t264 (TP8 main plan; TP16 keeps the bulk ALT plan);
#    09aa2c ALT non-bulk ring+wload; b671de ALT chunked xpre u6; f6504f ALT w8 cl4 chunked xpre (TP16).
# 2. skinny_gemm 268009 against mla_qkv_a ALT plans: 7b9dd5 w16 cl1 u6; 94ba31 w16 cl1 u4;
#    9a3186 w8 cl2 t264 u6; fa4bf0 ring u6; c5635c no ALT plan (the main plan).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_gs_wload 300 python3 scripts/gpu/bench_kernels.py --ops gemm_situ_and_mul --tps 8,16 --batches 1,2,4,8 \
  --shapes shared_gate_up --rounds 5 \
  --candidates 497382,091ade,288c0c,ed2c0f,4686a0,09aa2c,b671de \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_gs_wload.json"
step bench_sk_alt 200 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes mla_qkv_a --rounds 5 --candidates 268009,7b9dd5,94ba31,9a3186,fa4bf0 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk_alt.json"
python3 scripts/gpu/pick_winner.py "$OUT/bench_gs_wload.json" gemm_situ_and_mul 497382 > "$OUT/pick_gs.txt" 2>&1
python3 scripts/gpu/pick_winner.py "$OUT/bench_sk_alt.json" skinny_gemm 268009 > "$OUT/pick_sk.txt" 2>&1
cat "$OUT/pick_gs.txt" "$OUT/pick_sk.txt"
ls "$OUT"
