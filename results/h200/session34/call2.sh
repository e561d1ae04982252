# Session 34, device call 2 (carry [".device"], tree slimmed; run as
# `source scripts/gpu/at_head.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && bash scripts/gpu/session34_call2.sh`):
# 1. skinny_gemm 268009 against renders of 7b9dd5 (268009 + mla_qkv_a's ALT plan: 16 warps, no cluster,
#    chunked, unroll 6; call 1 measured it 1.054 on mla_qkv_a) with the latent GEMMs' main plan changed:
#    b92eb6 warps 16; df7759 warps 16 unroll 4; b27142 m_tiles 2 unroll 4; 7c4a79 cl2 t528;
#    7357d8 warps 4; 998f14 latent_up on the ALT plan too; 360cd0 warps 16 cl2 t528 unroll 4; and 94ba31
#    (7b9dd5 with ALT unroll 4). TP8 (the three shapes are replicated: TP16's are the same), B 1, 2, 4, 8.
# 2. perf_sweep (regate.sh PHASE=perf) on the best by geomean over 268009, if >= 1.03.
set -u
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_sk_plans 280 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes latent_down,latent_up,mla_qkv_a --rounds 5 \
  --candidates 268009,7b9dd5,94ba31,b92eb6,df7759,b27142,7c4a79,7357d8,998f14,360cd0 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk_plans.json"
win=$(python3 scripts/gpu/pick_winner.py "$OUT/bench_sk_plans.json" skinny_gemm 268009 --min-geomean 1.03 2>"$OUT/pick.txt")
cat "$OUT/pick.txt"; echo "winner: ${win:-none}"
[ -n "$win" ] && PHASE=perf timeout 250 bash scripts/gpu/regate.sh "skinny_gemm/$win" > "$OUT/regate_perf.log" 2>&1
tail -5 "$OUT/regate_perf.log" 2>/dev/null
ls "$OUT"
