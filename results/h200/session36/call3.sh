# Session 36, device call 3 (carry [".device"], tree slimmed): the other per-layer tables (session 27's
# configs and contexts) with all eight promoted kernels on.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
step bench_layers_k3-tp8-rank-addnorm 120 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank-addnorm --kernels both --layers 4 --iters 10
step bench_layers_k3-tp8-rank_ctx8192 150 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --context 8192 --kernels both --layers 4 --iters 10
step bench_layers_k3-tp8-rank_ctx32768 150 python3 scripts/gpu/bench_layers.py --config k3-tp8-rank --context 32768 --kernels both --layers 4 --iters 10
step bench_layers_k3-tp16-rank_ctx32768 150 python3 scripts/gpu/bench_layers.py --config k3-tp16-rank --context 32768 --kernels both --layers 4 --iters 10
ls "$OUT"
