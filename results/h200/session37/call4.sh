# session 37, call 4 (call 3 again, PYTHONPATH fixed, our kernels only): why torch.compile's situ_and_mul beats 59ea06 at TP8 B=64 (1.957 against
# 1.992 us in bench_situ37): inductor's generated kernel, per-kernel device times, ncu of both.
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c} PYTHONPATH=$PWD:${PYTHONPATH:-}
cat > /tmp/situ_compile.py <<'PY'
import sys, torch, reference_impls
from harness.opdef import Point
defn = reference_impls.get("situ_and_mul")
f = torch.compile(defn.reference)
for b in [int(x) for x in sys.argv[1].split(",")]:
    x = defn.make_inputs(Point(batch=b, tp=8), torch.Generator().manual_seed(0), "cuda")
    for _ in range(3):
        f(**x)
    torch.cuda.synchronize()
PY
false && TORCH_LOGS=output_code timeout 120 python3 /tmp/situ_compile.py 2,64 > "$OUT/inductor_situ.log" 2>&1; echo "inductor rc=$?"
grep -n "XBLOCK\|num_warps\|tl.load\|tl.store\|triton_heuristics\|def triton" "$OUT/inductor_situ.log" | head -40
timeout 150 python3 scripts/gpu/profile_kernels.py --ops situ_and_mul --batches 1,2,64 --candidates 59ea06,f209a6,0e6860 --no-compile-baseline \
  --max-copies 4096 > "$OUT/profile_situ.log" 2>&1; echo "profile rc=$?"; cat "$OUT/profile_situ.log" | cut -c1-200
ncu=${NCU:-/usr/local/cuda/bin/ncu}
false && timeout 120 "$ncu" --target-processes all -k "regex:triton" --launch-skip 2 --launch-count 1 --cache-control all \
  --clock-control none --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  -f -o "$OUT/ncu_situ_compile" python3 /tmp/situ_compile.py 64 > "$OUT/ncu_compile.log" 2>&1; echo "ncu compile rc=$?"
true || "$ncu" -i x --page details > "$OUT/ncu_situ_compile.txt" 2>&1
timeout 150 bash scripts/gpu/profile_source.sh situ_and_mul 59ea06 Situ situ59_b64 --batch 64 --tp 8 > "$OUT/ncu_ours.log" 2>&1; echo "ncu ours rc=$?"
grep -E "Duration|Block Size|Grid Size|Registers|DRAM Throughput|Elapsed Cycles|Achieved Occupancy" "$OUT/ncu_situ_compile.txt" "$OUT"/situ59_b64_cold.txt | head -30
rm -f "$OUT"/*.ncu-rep
ls "$OUT"
