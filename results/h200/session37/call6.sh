# session 37, call 6: torch.compile writing into the kernels' rotated outputs
# (gpu_eval.compiled_reference): the group probe again, inductor's kernel count, and the small
# ops' cold run again with it (bench_cold37b).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
cat > /tmp/into_code.py <<'PY'
import torch, reference_impls
from harness.opdef import Point
from harness.toolchain.gpu_eval import compiled_reference
defn = reference_impls.get("situ_and_mul")
pt = Point(batch=64, tp=8)
x = defn.make_inputs(pt, torch.Generator().manual_seed(0), "cuda")
o = defn.alloc_outputs(pt, "cuda")
f = compiled_reference(defn)
f(x, o)
torch.cuda.synchronize()
print("match", torch.equal(o["out"], defn.reference(**x)["out"]))
PY
PYTHONPATH=$PWD:${PYTHONPATH:-} TORCH_LOGS=output_code timeout 100 python3 /tmp/into_code.py > "$OUT/inductor_into.log" 2>&1; echo "into rc=$?"
grep -c "@triton.jit" "$OUT/inductor_into.log"; grep -E "^match|def triton_|tl.store" "$OUT/inductor_into.log" | cut -c1-200
timeout 200 python3 scripts/gpu/group_probe.py --op situ_and_mul --candidate 59ea06 --batches 1,2,64 --compile-into-outputs > "$OUT/group_situ_into.log" 2>&1; echo "probe rc=$?"
grep median "$OUT/group_situ_into.log"
timeout 300 python3 scripts/gpu/bench_kernels.py --ops kda_decode,add_rmsnorm,attn_res,situ_and_mul \
  --tps 8,16 --batches 1,2,4,8,16,32,64 --shapes all --state-dtypes fp32,bf16 --rounds 5 \
  --candidates 48258d,6041ff,7eee43,59ea06 --max-copies 4096 --no-eager --step-deadline-s 120 > "$OUT/bench_cold37b.log" 2>&1; echo "bench rc=$?"
mv "$OUT/bench_kernels_kda_decode-add_rmsnorm-attn_res-situ_and_mul.json" "$OUT/bench_cold37b.json"
tail -3 "$OUT/bench_cold37b.log"
