# Session 34, device call 5 (carry [".device"], tree slimmed; run as
# `source scripts/gpu/at_head.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && bash scripts/gpu/session34_call5.sh`):
# attn_res `mma`, second form (call 4's measured 0.86-0.88 of 6041ff: one chain of 16 dependent mma.sync, 16-bit
# fragment loads, and one round at nb5-8 pushing 3x the values): MMA_CHAINS 4 accumulators, 32-bit fragment
# loads, rounds as 6041ff (r1_max_nb 4, LARGE two rounds). 08ad83 = 6041ff + mma; 1a4a60 = + 8-CTA clusters of 128.
# Then perf_sweep on the best by geomean over 6041ff, if >= 1.03.
set -u
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_ar_mma2 300 python3 scripts/gpu/bench_kernels.py --ops attn_res --tps 8 --batches 1,4,16,64 \
  --shapes nb1,nb3,nb4,nb5,nb8 --candidates 6041ff,08ad83,1a4a60 --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_attn_res.json" "$OUT/bench_ar_mma2.json"
win=$(python3 scripts/gpu/pick_winner.py "$OUT/bench_ar_mma2.json" attn_res 6041ff --min-geomean 1.03 2>"$OUT/pick.txt")
cat "$OUT/pick.txt"; echo "winner: ${win:-none}"
[ -n "$win" ] && PHASE=perf timeout 230 bash scripts/gpu/regate.sh "attn_res/$win" > "$OUT/regate_perf.log" 2>&1
tail -5 "$OUT/regate_perf.log" 2>/dev/null
ls "$OUT"
