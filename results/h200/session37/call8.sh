# session 37, call 8: the loop's worker with gpu_eval.compiled_reference on the H200: the kda GPU
# test (now asserting torch.compile's time, state written in place) and `harness eval` of
# situ_and_mul over 14 points (past dynamo's default limit of 8 static shapes).
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
timeout 150 python3 -m pytest -q -m gpu tests/toolchain/test_cli_and_gpu.py -k "each_static_key" -rA > "$OUT/gpu_kda_compiled.log" 2>&1; echo "test rc=$?"; tail -2 "$OUT/gpu_kda_compiled.log"
timeout 170 python3 -m harness.cli eval situ_and_mul 59ea06 --batch 1,2,4,8,16,32,64 --tp 8,16 > "$OUT/eval_situ14.log" 2>&1; echo "eval rc=$?"
grep -E "B=|verdict" "$OUT/eval_situ14.log" | cut -c1-220
