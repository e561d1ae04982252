# Session 38, device call 2: call 1's small-ops run again (its JSON did not come back: a call
# returns at most 8 files, call 1 wrote 11), then the A/A probe on add_rmsnorm; one tarball back.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
W=/tmp/w38; mkdir -p $W; BACK=$OUT; export OUT=$W     # everything lands in $W, one tarball goes back
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$W/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$W/$name.log")"; }
B="python3 scripts/gpu/bench_kernels.py --rounds 5 --max-copies 4096 --eager-copies 64 --step-deadline-s 120"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$W/gpu.txt" 2>&1
step bench_all38_small 300 $B --ops kda_decode,add_rmsnorm,attn_res,situ_and_mul --tps 8,16 \
  --batches 1,2,4,8,16,32,64 --shapes all --state-dtypes fp32,bf16 --candidates 48258d,6041ff,7eee43,59ea06
mv "$W/bench_kernels_kda_decode-add_rmsnorm-attn_res-situ_and_mul.json" "$W/bench_all38_small.json"
step aa_addnorm38 80 python3 scripts/gpu/aa_probe.py --op add_rmsnorm --candidate 48258d --batches 1,64
tar -C $W -cJf "$BACK/call2.tar.xz" . && ls -la "$BACK"
