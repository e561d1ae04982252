#!/usr/bin/env bash
# (Call 2 is call 1 re-run with its probe fixed: call 1 named its log "p1/diag_arn" inside $OUT/p1, so
# the probe never ran there; its per-layer step is commented out here, having run in call 1.)
# Session 42, device call 1 (carry [".device"], tree slimmed): (a) add_rmsnorm's pushhybrid 48258d
# beside its 7 x 128 renders (scratch diag42/, `scripts/render_variant.py add_rmsnorm 48258d --set
# small_cs=7 --set small_threads=128 [...] --outside-space`): e09d42 (small plan 7 x 128, LARGE 1 x 224),
# e571e2 (+ LARGE 2 x 448), f9a44d (b_switch 64: the 7 x 128 plan at every B); two passes, TP8 B 1-64
# (add_rmsnorm's row is 7168 at TP8 and TP16 alike). (b) the per-layer on/off table of k3-tp8-rank with
# the eight promoted kernels (attn_res now 6f6818).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
K=kernels_generated/add_rmsnorm/48258db76dd2,diag42/add_rmsnorm/e09d42a157c4,diag42/add_rmsnorm/e571e2aab0d5,diag42/add_rmsnorm/f9a44d347ff2
for p in 1 2; do
  mkdir -p "$OUT/p$p"
  OUT="$OUT/p$p" step diag_arn 150 python3 scripts/gpu/diag_probe.py --op add_rmsnorm --tp 8 --batches 1,2,4,8,16,32,64 --kernels $K
  grep -h "B=\|rror" "$OUT/p$p/diag_arn.log"
done
: step bench_layers_k3-tp8-rank 270 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --kernels both --layers 4 --iters 10
: tail -12 "$OUT/bench_layers_k3-tp8-rank.log"
