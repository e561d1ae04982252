# session 37, call 2: situ_and_mul's fastvec / rowvec space again, cold, torch.compile in its own
# group (session 37's bench_cold37 found torch.compile 0.3-6% faster than 59ea06 at TP8 B=1, 2, 64).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_situ37 500 python3 scripts/gpu/bench_kernels.py --ops situ_and_mul --tps 8,16 --batches 1,2,4,8,16,32,64 \
  --rounds 7 --max-copies 4096 --no-eager --step-deadline-s 120 \
  --candidates 59ea06,0e6860,5ede2a,d83637,0aeb5e,923443,72b101,f209a6,4c1b11,8c76bb,29e1ee,347dab,cc4e36,63f022,7d0552,d2b16b
mv "$OUT/bench_kernels_situ_and_mul.json" "$OUT/bench_situ37.json"
python3 scripts/gpu/pick_winner.py "$OUT/bench_situ37.json" situ_and_mul 59ea06 --min-geomean 1.0 > "$OUT/pick_situ37.txt" 2>&1
cat "$OUT/pick_situ37.txt" | head -40
