#!/usr/bin/env bash
# Every fast-track gate on candidate(s) of one op, on the lent H200 (~5-6 min per candidate).
#
#   source scripts/gpu/at_head.sh && bash scripts/gpu/gate.sh OP CANDIDATE_ID [CANDIDATE_ID ...]
#   run carry: [".device", ".whl"], from a clean committed tree (at_head.sh: HEAD, with git history)
#   when .device + .whl + the tree pass the 64 MiB carry (du counts blocks): first a call with
#   carry [".whl"] only, running
#     mkdir -p /tmp/site && xz -dc .whl/site.tar.xz | tar xf - -C /tmp/site && touch /tmp/site/.ok
#   then, before the machine goes idle (30 s), this script with carry [".device"] only: setup.sh
#   finds /tmp/site/.ok and puts /tmp/site (llguidance, for numerics_model) on PYTHONPATH
#   MODEL_CONFIG=preset[:layers] the K3 config of numerics_model and the layer A/B (every op);
#     default k3-tp8-rank-addnorm for add_rmsnorm (the only decode path that calls it), else k3-tp8-rank
#
# Each candidate committed on HEAD is gated as the pull request that brings it (GATE_AS_PR=1,
# the default): on a throwaway branch, a base commit without its folder, then a commit adding
# exactly that folder; isolation diffs against that base, so any other change fails it.
#
# Writes the evidence record into the candidate folder (commit it afterwards: on the machine that
# received $OUT, `python scripts/land_evidence.py FILES_AT [--promote]`) and into $OUT:
#   $OUT/<id>/gate_report.json   the `harness gate --json` output (the full record)
#   $OUT/<id>/<record>.json      the evidence record file itself, compacted (commit this copy)
#   $OUT/<id>/assess.json        what `harness promote` would say about it (problems, if any)
#   $OUT/gate.log                the human-readable progress and verdict lines
# GATE_ONLY=a,b runs only those gates (`harness gate --only`): `harness promote` takes each
# gate's latest valid record, so a candidate too slow to gate within one 10-minute device
# command is gated over two. GATE_TIMEOUT_S caps each `harness gate` run (default 560 s).
set -uo pipefail
source scripts/gpu/setup.sh
source scripts/gpu/gate_pr.sh
OUT=${OUT:-/tmp/gate_out}
mkdir -p "$OUT"
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3-harness-cache}
LOG="$OUT/gate.log"
OP=${1:?usage: gate.sh OP CANDIDATE_ID...}
shift
CANDS=("$@")
[ ${#CANDS[@]} -eq 0 ] && { echo "usage: gate.sh OP CANDIDATE_ID..." >&2; exit 2; }
# default: the preset whose decode path calls OP, at the first candidate's TP (TP8 when its scope
# has it, else its smallest: harness.model.config.candidate_gate_model_config)
MODEL_CONFIG=${MODEL_CONFIG:-$(python3 -c 'import sys; from pathlib import Path; from harness.model.config import candidate_gate_model_config as g; print(g(Path.cwd(), *sys.argv[1:3]))' "$OP" "${CANDS[0]}")}

{
  echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo "== HEAD $(git rev-parse --short HEAD 2>/dev/null); uncommitted paths: $(git status --porcelain | wc -l); model config $MODEL_CONFIG"
  git status --porcelain | head -20
} >>"$LOG" 2>&1

start=$(git rev-parse --abbrev-ref HEAD)
for cid in "${CANDS[@]}"; do
  dir="kernels_generated/$OP/$cid"
  mkdir -p "$OUT/$cid"
  base_args=()
  pr=0
  if [ "${GATE_AS_PR:-1}" = 1 ] && git ls-files --error-unmatch "$dir/kernel.py" >/dev/null 2>&1; then
    # committed with others' work: gated as the PR that adds only its folder (gate_pr.sh)
    gate_pr_begin "$dir" "$cid" 2>>"$LOG" || { echo "== $cid: could not make its PR branch" >>"$LOG"; continue; }
    pr=1
    base_args=(--base HEAD~1)
    echo "== $cid: gated as a PR: base $(git rev-parse --short HEAD~1) (main without it), head adds only $dir" >>"$LOG"
  else
    added=$(git log -1 --format=%H --diff-filter=A -- "$dir/kernel.py" 2>/dev/null)
    if [ -n "$added" ]; then
      base_args=(--base "$added^")
      echo "== $cid: added in $(git log -1 --format='%h %s' "$added"); isolation base = its parent" >>"$LOG"
    else
      echo "== $cid: NOT committed: isolation compares against the default base (merge-base with main)" >>"$LOG"
    fi
  fi
  before=$(ls "$dir/evidence" 2>/dev/null | sort)
  t0=$(date +%s)
  # The whole gate run stays under the 10-minute command limit even if a gate hangs to its deadline.
  timeout ${GATE_TIMEOUT_S:-560} python3 -m harness.cli gate "$OP" "$cid" --model-config "$MODEL_CONFIG" "${base_args[@]}" ${GATE_ONLY:+--only "$GATE_ONLY"} --json \
    >"$OUT/$cid/gate_report.json" 2>>"$LOG"
  rc=$?
  echo "== $cid: harness gate exit $rc after $(( $(date +%s) - t0 )) s" >>"$LOG"
  python3 - "$OUT/$cid/gate_report.json" >>"$LOG" 2>&1 <<'EOF'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except Exception as exc:  # noqa: BLE001
    print(f"   no JSON report: {exc}")
    sys.exit(0)
for g in rec["gates"]:
    print(f"   {g['verdict'].upper():8} {g['gate']:15} {g['duration_s']:8.1f} s")
    for r in g["reasons"][:6]:
        print(f"            {r}")
    n = g["numbers"]
    if g["gate"] == "perf_sweep":
        print(f"            geomean speedup {n.get('geomean_speedup')}, layer {n.get('layer') and {k: n['layer'][k] for k in ('on_us', 'off_us', 'noise_rel')}}")
    if g["gate"] == "numerics_model":
        for run in n.get("runs", []):
            print("            " + ", ".join(f"{k}={run.get(k)}" for k in ("kind", "tokens", "context", "greedy_agreement",
                  "sampling_agreement", "max_kl", "max_logit_rel_err", "kernel_calls_on", "kernel_calls_off", "valid")))
print(f"   record: {rec.get('record')}")
EOF
  for f in $(ls "$dir/evidence" 2>/dev/null | sort); do
    # the copy to commit, one line per top-level key (the record hash is over canonical JSON)
    echo "$before" | grep -qx "$f" || { cp "$dir/evidence/$f" "$OUT/$cid/$f" && chmod u+w "$OUT/$cid/$f" &&
      python3 scripts/compact_evidence.py "$OUT/$cid/$f" >>"$LOG" 2>&1; }
  done
  python3 - "$OP" "$cid" >"$OUT/$cid/assess.json" 2>>"$LOG" <<'EOF'
import json, sys
from pathlib import Path
from harness.errors import UserError
from harness.promotion import assess
try:
    a = assess(Path.cwd(), sys.argv[1], sys.argv[2])
except UserError as exc:                 # e.g. no such candidate: one line in assess.json, no traceback
    print(json.dumps({"op": sys.argv[1], "candidate": sys.argv[2], "promotable": False, "problems": [str(exc)]}))
    sys.exit(0)
print(json.dumps({"op": a.op, "candidate": a.candidate_id, "promotable": a.ok, "problems": a.problems,
                  "gates": a.gates}, indent=2, default=str))
EOF
  # back to the starting branch, the records committed on gate/<id>: the next candidate's tree is clean
  [ "$pr" = 1 ] && { gate_pr_end "$dir" "$cid" "$start" >>"$LOG" 2>&1 || echo "== $cid: could not leave gate/$cid" >>"$LOG"; }
done
tail -60 "$LOG"
