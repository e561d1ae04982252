#!/usr/bin/env bash
# `harness optimize --op <op> --promote` end to end on the lent H200 (issue 6):
#
#   source scripts/gpu/at_head.sh && [HARD_S=N] bash scripts/gpu/optimize_promote.sh [OP] [TIME_LIMIT_S] [ARGS...]
#   (default moe_router, 300; ARGS go to `harness optimize`, e.g. --rounds 1; run carry:
#   [".device", ".whl"])
#
# --time-limit stops new work (no draft's GPU evaluation and no gates start past it), but work in
# flight finishes. HARD_S (default TIME_LIMIT_S + 240) interrupts the run for good (SIGINT, then
# SIGKILL); what it did is copied out either way (session 24 lost a whole run to an outer
# `timeout` that killed this script before its copy).
#
# at_head.sh gives the device copy a git history (isolation needs a base, `--promote` a HEAD
# to branch from) and a git identity. Writes into $OUT:
#   optimize.json       the run summary (`--json`): rounds, candidates, speedups, gates, promotion
#   optimize.log        the progress lines
#   run/                runs/<id>/ (events.jsonl, summary.json, ...)
#   candidates/<id>/    the folder of every candidate of the run (kernel.py, candidate.json, evidence/)
#   promote.patch       the promotion commit (git format-patch main..promote/<op>/<id>), if any
# `harness optimize` exits 1 when it promoted nothing (optimize.json's promoted.reason says why). A
# best draft it left ungated (gates.reason): copy candidates/<id>/ into kernels_generated/<op>/,
# commit it, and gate it in a later call with scripts/gpu/gate.sh.
set -uo pipefail
OP=${1:-moe_router}
LIMIT=${2:-300}
shift $(( $# < 2 ? $# : 2 ))
HARD_S=${HARD_S:-$(( LIMIT + 240 ))}
git rev-parse --verify -q HEAD >/dev/null || { echo "no git history: source scripts/gpu/at_head.sh first" >&2; exit 2; }
OUT=${OUT:-/tmp/optimize_out}
mkdir -p "$OUT"
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3-harness-cache}
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name --format=csv,noheader) HEAD $(git rev-parse --short HEAD)" >"$OUT/optimize.log"
before=$(ls "kernels_generated/$OP")
t0=$(date +%s)
timeout -s INT -k 20 "$HARD_S" python3 -m harness.cli optimize --op "$OP" --promote --time-limit "$LIMIT" --json "$@" \
  >"$OUT/optimize.json" 2>>"$OUT/optimize.log"
echo "== optimize exit $? after $(( $(date +%s) - t0 )) s (1: nothing promoted; 124: interrupted at HARD_S=$HARD_S)" >>"$OUT/optimize.log"
run=$(ls -td runs/*/ 2>/dev/null | head -1)
[ -n "$run" ] && cp -r "$run" "$OUT/run"
mkdir -p "$OUT/candidates"
for c in $(ls "kernels_generated/$OP"); do
  if ! echo "$before" | grep -qx "$c" || [ -d "kernels_generated/$OP/$c/evidence" ]; then
    [ -d "kernels_generated/$OP/$c" ] && cp -r "kernels_generated/$OP/$c" "$OUT/candidates/$c"
  fi
done
for b in $(git branch --list "promote/$OP/*" --format='%(refname:short)'); do
  git format-patch -q --stdout "main..$b" >"$OUT/promote.patch"
  echo "== promotion branch $b: $(git log -1 --format='%h %s' "$b")" >>"$OUT/optimize.log"
done
tail -40 "$OUT/optimize.log"
