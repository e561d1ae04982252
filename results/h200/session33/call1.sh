# Session 33, device call 1, kept as the record of the run (it ran as scripts/gpu/session33_study.sh; carry [".device"]:
# .whl did not fit beside the tree), after `bash scripts/gpu/slim_tree.sh on`:
# skinny_gemm fcb21b against scratch renders of it (untracked, scripts/render_variant.py):
#   6fc657 wload=pf256, 0f50ad wload=pf128, ca9d83 wload=nol1, 29ca46 wload=pf256nol1,
#   ab4dec xpre unroll=6, 6ab167 xpre, edc782 ring unroll=6, 2732a8 ring unroll=4,
#   94f7c3 wload=pf256 xpre unroll=6.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_sk_latent 330 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes latent_down,latent_up --rounds 5 \
  --candidates fcb21b,6fc657,0f50ad,ca9d83,29ca46,ab4dec,6ab167,edc782,2732a8,94f7c3 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk_latent.json"
step bench_sk_qkv 150 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,8 \
  --shapes mla_qkv_a --rounds 5 --candidates fcb21b,6fc657,0f50ad,ca9d83,29ca46 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk_qkv.json"
ls "$OUT"
