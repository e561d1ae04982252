#!/usr/bin/env bash
# Re-gate many candidates of any ops within one device session: what a change to hashed gate
# code calls for (every evidence record carries the gate code's hash, so such a change makes the
# evidence of every promoted kernel stale; `harness ci verify` then fails until they are re-gated).
# gate.sh, one candidate after another, takes ~5-6 min each: six promoted kernels are ~32 min,
# more than a session's 30 min of device time. This runs the gates in two phases:
#
#   PHASE=checks  every gate but perf_sweep, REGATE_JOBS candidates at once (default 7: eight ran the H200 out of memory), each in
#                 its own git worktree (gate.sh gates a committed candidate on a branch gate/<id>
#                 and checks it out; worktrees keep those checkouts apart). The model gate's
#                 lockstep runs are CPU-bound (~45 ms a decode step, the GPU mostly idle; a
#                 verdict never depends on time), so they share the GPU and the 16 cores.
#   PHASE=perf    perf_sweep alone, one candidate at a time: timing needs the GPU to itself.
#
# `harness promote` and `harness ci verify` take each gate's latest valid record, so the two
# phases' records together are a complete gate run (gate.sh's GATE_ONLY, its documented split).
#
#   here:    commit everything; `bash scripts/gpu/prepare-whl` once
#   device:  call 1, carry [".whl"]:    mkdir -p /tmp/site && xz -dc .whl/site.tar.xz | tar xf - -C /tmp/site && touch /tmp/site/.ok
#            call 2, carry [".device"]: AT_HEAD_STRICT=1 source scripts/gpu/at_head.sh && export HARNESS_CACHE=/tmp/k3c &&
#                                       PHASE=checks bash scripts/gpu/regate.sh OP/ID OP/ID ...
#            (AT_HEAD_STRICT=1: refuse a snapshot that would take in candidate folders that travelled
#            untracked, e.g. a study's scratch renders; needs slim_tree.sh's .slim_tracked)
#            call 3, carry [".device"]: ... PHASE=perf bash scripts/gpu/regate.sh OP/ID ...
#            (each call within 30 s of the last, while the machine is warm: /tmp/site and the
#            compile cache live there; a cold machine needs call 1 again)
#            Only numerics_model needs /tmp/site. For a candidate near the perf gate's geomean
#            bar, run PHASE=perf first (carry [".device"]); then, if it passes, unpack the site
#            and run PHASE=checks in one call (carry [".device", ".whl"], when both fit the 64 MiB:
#            scripts/gpu/carry_size.py .device .whl). Session 20 promoted kda 7eee43 that way.
#   here:    mkdir -p /tmp/rg && tar xJf FILES_AT/regate_<phase>.tar.xz -C /tmp/rg &&
#            python scripts/land_evidence.py /tmp/rg/<phase> [--promote]
#
# Writes $OUT/regate_<phase>.tar.xz, rewritten as each candidate finishes (a device call returns
# at most 8 files, and only what is under $OUT when it ends): <phase>/<id>/ is
# gate.sh's folder for the candidate (the compacted records, gate_report.json, assess.json) and
# <phase>/logs/<id>.log its gate.log; $OUT/regate_<phase>.txt is the verdict summary (also
# rewritten after every candidate; a candidate not yet done reads "(no verdict yet)").
set -uo pipefail
PHASE=${PHASE:?PHASE=checks or PHASE=perf}
case "$PHASE" in
  checks) ONLY=isolation,static,scope,numerics_unit,numerics_model; JOBS=${REGATE_JOBS:-7} ;;   # 8 ran out of GPU memory
  perf)   ONLY=perf_sweep; JOBS=1 ;;
  *) echo "regate.sh: PHASE must be checks or perf, not $PHASE" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "usage: PHASE=checks|perf regate.sh OP/ID [OP/ID ...]" >&2; exit 2; }
OUT=${OUT:-/tmp/regate_out}
HEAD_DIR=$PWD                     # /tmp/head after at_head.sh: a git repo whose main is HEAD
# The device copy's own .git may hold an older history: gating from it gates old gate code
# (session 12 did, once, when at_head.sh ran in a background subshell). Refuse anything else.
if [ "$(git -C "$HEAD_DIR" log -1 --format=%s main 2>/dev/null)" != "device snapshot of HEAD" ]; then
  echo "regate.sh: $HEAD_DIR is not at_head.sh's snapshot; run \`source scripts/gpu/at_head.sh && ...\` first" >&2
  exit 3
fi
# numerics_model's structured-output run needs llguidance (the .whl site): without it every
# candidate's structured run errors and every record FAILs (session 26 spent a 280 s call that way).
if [ "$PHASE" = checks ] && ! python3 -c "import llguidance" 2>/dev/null; then
  echo "regate.sh: llguidance is not importable, so numerics_model's structured-output run would fail every candidate; carry .whl (setup.sh unpacks .whl/site.tar.xz into /tmp/site) and run again" >&2
  exit 4
fi
exclude="$(git -C "$HEAD_DIR" rev-parse --git-common-dir)/info/exclude"   # the links each worktree gets
grep -qx '/.device' "$exclude" 2>/dev/null || printf '/.device\n/.whl\n' >>"$exclude"
TMP=${REGATE_TMP:-/tmp}              # worktrees under $TMP/wt, work under $TMP/rg (tests: a tmp dir)
WORK=$TMP/rg/$PHASE
rm -rf "$WORK" && mkdir -p "$WORK/logs" "$OUT" && touch "$TMP/rg/pack.lock"
export HARNESS_CACHE=${HARNESS_CACHE:-/tmp/k3-harness-cache}
export GATE_TIMEOUT_S=${GATE_TIMEOUT_S:-540}

one() {                            # one candidate: its own worktree, its own gate.sh output
  local op=${1%%/*} cid=${1##*/}
  local wt=$TMP/wt/$cid          # (its own line: `local` expands every word before assigning)
  rm -rf "$wt"; git -C "$HEAD_DIR" worktree prune
  git -C "$HEAD_DIR" branch -qD "gate/$cid" 2>/dev/null
  git -C "$HEAD_DIR" worktree add -q --detach "$wt" main || { echo "$cid: no worktree" >"$WORK/logs/$cid.log"; return 1; }
  [ -e "$wt/.device" ] || ln -s "$HEAD_DIR/.device" "$wt/.device"     # (the snapshot may track the link)
  [ -e "$HEAD_DIR/.whl" ] && [ ! -e "$wt/.whl" ] && ln -s "$HEAD_DIR/.whl" "$wt/.whl"
  local t0
  t0=$(date +%s)
  (cd "$wt" && unset PYTHONPATH && OMP_NUM_THREADS=2 OUT="$TMP/rg/out-$PHASE-$cid" GATE_ONLY=$ONLY \
     bash scripts/gpu/gate.sh "$op" "$cid" >/dev/null 2>&1)
  mkdir -p "$WORK/$cid"
  cp -r "$TMP/rg/out-$PHASE-$cid/$cid/." "$WORK/$cid/" 2>/dev/null
  cp "$TMP/rg/out-$PHASE-$cid/gate.log" "$WORK/logs/$cid.log" 2>/dev/null
  echo "== $op/$cid: $PHASE took $(( $(date +%s) - t0 )) s" >>"$WORK/logs/$cid.log"
  pack
}
pack() {                           # $OUT's archive and summary after every candidate: a call cut off
  flock "$TMP/rg/pack.lock" bash -c '  # at its limit still brings back what finished (session 12 lost
    tar cJf "$1.tmp" -C "$3" "$2" && mv "$1.tmp" "$1"; summarize' _ "$OUT/regate_$PHASE.tar.xz" "$PHASE" "$TMP/rg"
}                                  # a phase, session 25 a summary)
summarize() {                      # $OUT/regate_<phase>.txt: each candidate's verdicts so far
  local spec cid summary="$OUT/regate_$PHASE.txt"
  : >"$summary.tmp"
  for spec in $SPECS; do
    cid=${spec##*/}
    echo "#### $spec" >>"$summary.tmp"
    grep -E "^   (PASS|FAIL|ERROR|NOT_RUN)|^            |harness gate exit|took" "$WORK/logs/$cid.log" >>"$summary.tmp" 2>/dev/null \
      || echo "   (no verdict yet)" >>"$summary.tmp"
  done
  mv "$summary.tmp" "$summary"
}
export -f one pack summarize
SPECS="$*"
export PHASE ONLY WORK HEAD_DIR OUT TMP SPECS

echo "== $(date -u +%FT%TZ) regate $PHASE, $JOBS at once: $*"
echo "== gate code $(python3 -c 'from pathlib import Path; from gates import gate_code_hashes; print(" ".join(f"{g}={h[:12]}" for g, h in gate_code_hashes(Path.cwd()).items()))')"
if [ "$PHASE" = perf ]; then
  # perf_sweep compiles each candidate in a sandbox first (cached under HARNESS_CACHE): on a
  # machine that did not run the checks, fill that cache for every candidate at once first.
  t0=$(date +%s)
  printf '%s\n' "$@" | xargs -P 8 -I{} sh -c 'python3 -m harness.cli compile "${1%%/*}" "${1##*/}" --arch sm_90a >/dev/null 2>&1' _ {}
  echo "== sandbox compiles (sm_90a, all candidates at once) took $(( $(date +%s) - t0 )) s"
fi
printf '%s\n' "$@" | xargs -P "$JOBS" -I{} bash -c 'one "$@"' _ {}

pack
cat "$OUT/regate_$PHASE.txt"
