# Session 34, device call 4 (carry [".device"], tree slimmed; run as
# `source scripts/gpu/at_head.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && bash scripts/gpu/session34_call4.sh`):
# attn_res's new gramhybrid knob `mma` (the Gram and the dots by mma.sync) against the promoted 6041ff:
#   bcd5d2 = 6041ff + mma, r1_max_nb 8 (one round at every NB, LARGE too); 8868c0 = mma with r1_max_nb 4;
#   e5f0d4 = bcd5d2 on 8-CTA clusters of 128 threads for B <= 32.
# Then perf_sweep on the best by geomean over 6041ff, if >= 1.03.
set -u
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_ar_mma 300 python3 scripts/gpu/bench_kernels.py --ops attn_res --tps 8 --batches 1,4,16,64 \
  --shapes nb1,nb3,nb4,nb5,nb8 --candidates 6041ff,bcd5d2,8868c0,e5f0d4 --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_attn_res.json" "$OUT/bench_ar_mma.json"
win=$(python3 scripts/gpu/pick_winner.py "$OUT/bench_ar_mma.json" attn_res 6041ff --min-geomean 1.03 2>"$OUT/pick.txt")
cat "$OUT/pick.txt"; echo "winner: ${win:-none}"
[ -n "$win" ] && PHASE=perf timeout 230 bash scripts/gpu/regate.sh "attn_res/$win" > "$OUT/regate_perf.log" 2>&1
tail -5 "$OUT/regate_perf.log" 2>/dev/null
ls "$OUT"
