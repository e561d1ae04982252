# Session 38, device call 3: the README's main job on the H200 at HEAD (as session 23 did at
# 42ca318): one round of the template agent on moe_router, gates left out (--time-limit 30: the
# gates take longer than this session's device time allows). The loop now also times the promoted
# 876e93 and torch.compile writing into rotated outputs (session 37). One tarball back.
# Run as: source scripts/gpu/at_head.sh && export OUT && bash scripts/gpu/session38_call3.sh
set -u
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
W=/tmp/w38c3; rm -rf $W; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$W/gpu.txt" 2>&1
git log --oneline -1 > "$W/head.txt"
t0=$(date +%s)
timeout 420 python3 -m harness.cli optimize --op moe_router --rounds ${ROUNDS:-1} --time-limit ${TIME_LIMIT:-30} --json \
  > "$W/optimize_moe_router.json" 2> "$W/optimize_moe_router.log"
echo "optimize rc=$? after $(( $(date +%s) - t0 )) s" | tee -a "$W/optimize_moe_router.log"
run=$(ls -td runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] && cp "$run"/events.jsonl "$W/optimize_moe_router_events.jsonl" 2>/dev/null
[ -n "$run" ] && ls -la "$run" > "$W/run_files.txt"
tail -c 3000 "$W/optimize_moe_router.json"
tar -C $W -cJf "$OUT/call3.tar.xz" . && ls -la "$OUT"
