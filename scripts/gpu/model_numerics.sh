#!/usr/bin/env bash
# Only the numerics_model gate (kernel on / off / benign-perturbation noise path, lockstep)
# for moe_router candidate(s) on the lent H200 (~3 min per candidate with 3 layers).
#
#   bash scripts/gpu/model_numerics.sh [CANDIDATE_ID ...]   (default: 7cda33699a87 3407b02d6558)
#   run carry: [".device", ".whl"]
#   MODEL_CONFIG=k3-tp8-rank:3 by default. Each gate run is capped at 250 s.
#   EXPERIMENTS=1 (default) also runs, without any candidate, scripts/noise_floor.py on the GPU:
#     control_reference.json  the reference registered as the "kernel": must be exactly 0 drift
#                             (else the GPU reference path itself is nondeterministic)
#     benign_splitk16.json    a split-K-16 router vs the gate's split-K-8 noise path, 512 steps
#   To stay under the 10-minute command limit, run the experiments and the gates in two calls:
#     EXPERIMENTS=1 bash scripts/gpu/model_numerics.sh none
#     EXPERIMENTS=0 bash scripts/gpu/model_numerics.sh 7cda33699a87 3407b02d6558
#
# 7cda33699a87 is the PDL mma_topk candidate that failed the absolute thresholds;
# 3407b02d6558 is the non-PDL one, for comparison. Writes to $OUT:
#   $OUT/<id>/gate_report.json   the `harness gate --only numerics_model --json` output
#   $OUT/<id>/drift.json         per run: kernel vs noise-path statistics and per-step series
#   $OUT/model_numerics.log      progress and verdict lines
set -uo pipefail
source scripts/gpu/setup.sh
OUT=${OUT:-/tmp/model_numerics_out}
mkdir -p "$OUT"
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3-harness-cache}
LOG="$OUT/model_numerics.log"
CFG=${MODEL_CONFIG:-k3-tp8-rank:3}
CANDS=("$@")
[ ${#CANDS[@]} -eq 0 ] && CANDS=(7cda33699a87 3407b02d6558)
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) HEAD $(git rev-parse --short HEAD 2>/dev/null)" >>"$LOG"

if [ "${EXPERIMENTS:-1}" = 1 ]; then
  timeout 120 python3 scripts/noise_floor.py --device cuda --config "$CFG" --on reference --steps 256 --prompt 32 \
    --out "$OUT/control_reference.json" >>"$LOG" 2>&1; echo "== control exit $?" >>"$LOG"
  timeout 200 python3 scripts/noise_floor.py --device cuda --config "$CFG" --on splitk16 --steps 512 --prompt 32 \
    --out "$OUT/benign_splitk16.json" >>"$LOG" 2>&1; echo "== splitk16 exit $?" >>"$LOG"
fi

for cid in "${CANDS[@]}"; do
  [ "$cid" = none ] && continue
  mkdir -p "$OUT/$cid"
  t0=$(date +%s)
    timeout 250 python3 -m harness.cli gate moe_router "$cid" --only numerics_model --model-config "$CFG" --json \
    >"$OUT/$cid/gate_report.json" 2>>"$LOG"
  echo "== $cid: exit $? after $(( $(date +%s) - t0 )) s" >>"$LOG"
  python3 - "$OUT/$cid/gate_report.json" "$OUT/$cid/drift.json" >>"$LOG" 2>&1 <<'EOF'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except Exception as exc:  # noqa: BLE001
    print(f"   no JSON report: {exc}")
    sys.exit(0)
drift = {}
for g in rec.get("gates", []):
    if g["gate"] != "numerics_model":
        continue
    print(f"   {g['verdict'].upper()} numerics_model {g['duration_s']:.1f} s")
    for r in g["reasons"][:8]:
        print(f"      {r}")
    for run in g["numbers"].get("runs", []):
        n = run.get("noise", {})
        keys = ("greedy_agreement", "sampling_agreement", "max_kl", "mean_kl", "max_logit_rel_err",
                "first_divergence_step", "first_flip_step", "steps_with_flips")
        print(f"   {run.get('kind')}: tokens={run.get('tokens')} calls on/off={run.get('kernel_calls_on')}/{run.get('kernel_calls_off')}"
              f" noise calls={n.get('calls')}")
        print("      kernel: " + ", ".join(f"{k}={run.get(k)}" for k in keys))
        print("      noise:  " + ", ".join(f"{k}={n.get(k)}" for k in keys))
        drift[run.get("kind")] = {"kernel": {k: run.get(k) for k in keys + ("kl_per_step", "logit_rel_err_per_step", "expert_flips_per_step")},
                                  "noise": n}
json.dump(drift, open(sys.argv[2], "w"))
EOF
done
tail -40 "$LOG"
