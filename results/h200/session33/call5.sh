# Session 33, device call 5, kept as the record of the run (it ran as scripts/gpu/session33_call3.sh; carry [".device"],
# after `bash scripts/gpu/slim_tree.sh on`; run as
# `source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && bash scripts/gpu/session33_call3.sh`):
# skinny_gemm's whole scope with the promoted 268009 beside fcb21b (session 32's bench_gemm32 command,
# skinny alone), then the per-layer on/off tables at TP8 and TP16 with every promoted kernel.
set -u
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_skinny33 200 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8,16 --batches 1,2,4,8 \
  --shapes all --rounds 5 --candidates 268009,fcb21b --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_skinny33.json"
for c in k3-tp8-rank k3-tp16-rank; do
  step "bench_layers_$c" 150 python3 scripts/gpu/bench_layers.py --config "$c" --kernels both --layers 4 --iters 10
done
for f in "$OUT"/*.json; do xz -9 "$f"; done
ls "$OUT"
