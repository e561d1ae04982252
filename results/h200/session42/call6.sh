#!/usr/bin/env bash
# Session 42, device call 6 (carry [".device"], tree slimmed, under at_head.sh): moe_router 1c5dd520293f
# (876e93 with topk_sort=bitonic: each warp's top-16 by a bitonic network instead of 16 redux/ballot
# rounds; call 5 timed those rounds at 1.15 us of 8.66) beside 876e93, two passes of diag_probe, TP8
# B 1-64. Then, only if it is correct at every point and at most 0.96x 876e93 in geomean over pass 2,
# the perf gate alone on it (PHASE=perf regate.sh; the checks are for a later call).
set -u
trap 'bash scripts/gpu/pack_out.sh' EXIT
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3c}
step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"; timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
K=kernels_generated/moe_router/876e935cf35f,kernels_generated/moe_router/1c5dd520293f
for p in 1 2; do
  mkdir -p "$OUT/p$p"
  OUT="$OUT/p$p" step diag_router 150 python3 scripts/gpu/diag_probe.py --op moe_router --tp 8 --batches 1,2,4,8,16,32,64 --kernels $K
  grep -h "B=\|rror" "$OUT/p$p/diag_router.log"
done
python3 - "$OUT/p2/diag_moe_router_default_tp8.json" > "$OUT/decision.txt" <<'PY'
import json, math, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
except Exception as exc:                      # noqa: BLE001
    print(f"no gate: no probe record ({exc})"); sys.exit(0)
v = [r["variants"].get("1c5dd520293f", {}) for r in rows]
ok = len(v) == 7 and all(x.get("ok") for x in v)
g = math.exp(sum(math.log(x["vs_first"]) for x in v) / len(v)) if ok else float("nan")
print(("GATE" if ok and g <= 0.96 else "no gate") + f": correct at every point {ok}, geomean {g:.4f} of 876e93")
PY
cat "$OUT/decision.txt"
if grep -q '^GATE' "$OUT/decision.txt"; then
  PHASE=perf timeout 420 bash scripts/gpu/regate.sh moe_router/1c5dd520293f
  cat "$OUT/regate_perf.txt" 2>/dev/null
fi
