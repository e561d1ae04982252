# Session 36, device call 1 (carry [".device"], tree slimmed): scratch renders (scripts/render_variant.py, untracked)
# 1. skinny_gemm mla_qkv_a (TP8, B 1-8) against c8b7a7 (16 warps, 16-row CTAs, no cluster): 32-row CTAs
#    (m_tiles 2) on 2-CTA K clusters, so a CTA reads half of x (at B=8 x is half the bytes a 16-row CTA
#    streams beside its weights): a95438 w16 u4; 274653 w8 u4; 34dcd6 w8 u6; and e09df4 = c8b7a7 with
#    wload=pf256nol1. (4ac087, w16 u6, spills 220 bytes: not run.)
# 2. the GPU tests of the loop's per-point incumbents (kda fp32/bf16; skinny narrow + broad).
# 3. harness eval --vs promoted on skinny_gemm 7b9dd5 at mla_qkv_a and latent_down.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
step bench_sk36 240 python3 scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8 --batches 1,2,4,8 \
  --shapes mla_qkv_a --rounds 7 --candidates c8b7a7,a95438,274653,34dcd6,e09df4 \
  --no-compile-baseline --no-eager --step-deadline-s 120
mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_sk36.json"
python3 scripts/gpu/pick_winner.py "$OUT/bench_sk36.json" skinny_gemm c8b7a7 --min-geomean 1.05 > "$OUT/pick_sk36.txt" 2>&1
cat "$OUT/pick_sk36.txt"
step gpu_incumbent 260 python3 -m pytest -q -m gpu tests/toolchain/test_cli_and_gpu.py -k search_times -rA
step eval_vs_promoted 200 python3 -m harness.cli eval skinny_gemm 7b9dd5 --batch 1,8 --tp 8 \
  --shape mla_qkv_a,latent_down --vs promoted --no-compiled-ref
ls "$OUT"
