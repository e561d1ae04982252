# Session 33, device call 2, kept as the record of the run (it ran as scripts/gpu/session33_call2.sh; carry [".device"],
# after `bash scripts/gpu/slim_tree.sh on`; run as
# `source scripts/gpu/at_head.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && bash scripts/gpu/session33_call2.sh`):
# 1. skinny_gemm fcb21b against the five committed knob candidates over the three scope shapes (TP8, B=1,8);
# 2. perf_sweep (regate.sh PHASE=perf) on the one with the best geomean over fcb21b, if >= 1.03.
set -u
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_sk_knobs 260 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,8 \
  --shapes latent_down,latent_up,mla_qkv_a --rounds 5 \
  --candidates fcb21b,0f50ad,cd9d23,f38278,f9ed44,268009 --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk_knobs.json"
win=$(python3 scripts/gpu/pick_winner.py "$OUT/bench_sk_knobs.json" skinny_gemm fcb21b --min-geomean 1.03 2>"$OUT/pick.txt")
cat "$OUT/pick.txt"; echo "winner: ${win:-none}"
[ -n "$win" ] && PHASE=perf timeout 260 bash scripts/gpu/regate.sh "skinny_gemm/$win" > "$OUT/regate_perf.log" 2>&1
tail -5 "$OUT/regate_perf.log" 2>/dev/null
ls "$OUT"
