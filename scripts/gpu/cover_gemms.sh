#!/usr/bin/env bash
# The GEMMs no promoted kernel runs: one device call times renders of the promoted kernels there
# against what runs today (cuBLAS; for the fused op the unfused pair, bench_kernels.py's "unfused"
# bar) and proposes the human candidates that win. What to render is a plan (COVER_PLAN, default the newest round in
# scripts/gpu/cover_plans/): its shapes and its renders, each with the id it must come out as.
#
#   here:    bash scripts/gpu/cover_gemms.sh plan          # which plan runs (COVER_PLAN or the newest)
#            bash scripts/gpu/cover_gemms.sh render        # the plan's scratch candidates (untracked)
#            bash scripts/gpu/slim_tree.sh on results docs 'kernels_generated/*/*/evidence/*'
#   device:  carry [".device"] (the bench needs no .whl):
#            source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && \
#              bash scripts/gpu/cover_gemms.sh bench
#   device:  call 2, within the warm machine's idle window (seconds) after call 1, carry [".device", ".whl"]:
#            source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && \
#              bash scripts/gpu/cover_gemms.sh gate
#            proposes and renders the winners from call 1's JSONs (kept in COVER_DIR, default
#            /tmp/cover) exactly as the next step does here, then runs the perf gate on the new
#            candidates (regate.sh PHASE=perf at at_head.sh's snapshot), then, time left, the other
#            gates (PHASE=checks) on those that passed: $OUT/regate_{perf,checks}.*,
#            $OUT/new_ids.txt, $OUT/human_candidates.json, $OUT/new_candidates.tar.xz (the renders as
#            gated). Saves a cold start: a machine goes back after ~30 s idle, so the commit below
#            could not happen between the two calls.
#   here:    bash scripts/gpu/slim_tree.sh off; copy FILES_AT/* to results/<card: h200, h100>/<session>/;
#            after call 2: COVER_DIR=<call 2's files> bash scripts/gpu/cover_gemms.sh adopt (its renders
#            byte for byte and its human_candidates.json: a render here would stamp another created_utc
#            into candidate.json, so the gate records' candidate hash would not match), commit, then
#            python3 scripts/land_evidence.py <the regate tarballs, unpacked>/{perf,checks} --promote.
#            Without call 2: COVER_DIR=<call 1's files> bash scripts/gpu/cover_gemms.sh propose
#            (pick_winner.py's per-shape proposal against cuBLAS, or the unfused pair for
#            gemm_situ_and_mul, appended to prompts/kernels/human_candidates.json and rendered),
#            commit, and gate the new candidates (PHASE=perf, then PHASE=checks: regate.sh's header).
#
# Compile times on the H200 are ~1.2 s a (candidate, shape, TP) (session 33); a plan's bench
# compiles renders x shapes x TPs of them.
# COVER_PLAN: the plan file; RENDER_ROOT: where render writes and missing looks (default
# kernels_generated, where bench looks; tests use a scratch root); PYTHON: the interpreter (default python3).
set -uo pipefail
PY=${PYTHON:-python3}
ROOT_DIR=${RENDER_ROOT:-kernels_generated}
COVER_DIR=${COVER_DIR:-/tmp/cover}    # bench copies its JSONs here; propose and gate read them (call 2)
PLAN=${COVER_PLAN:-$(ls "$(dirname "$0")"/cover_plans/round*.sh | sort -V | tail -1)}
SKINNY_SHAPES='' SKINNY_EXCLUDE='' SKINNY_SKIP='' SKINNY_TPS=8,16 SITU_SHAPES='' RENDERS=()
SKINNY_BATCHES=1,8    # the batches bench times the skinny renders at
SKINNY_ALSO=()        # committed candidates (id prefixes) bench times beside the renders: the promoted
                      # kernels a round must beat where one already runs (pick_winner reads cuBLAS only)
# shellcheck disable=SC1090
source "$PLAN" || { echo "cover_gemms.sh: cannot read the plan $PLAN" >&2; exit 2; }
SKINNY_IDS=() SITU_IDS=()
for r in "${RENDERS[@]}"; do
  read -r op id _ <<< "$r"
  case $op in
    skinny_gemm) SKINNY_IDS+=("$id") ;;
    gemm_situ_and_mul) SITU_IDS+=("$id") ;;
    *) echo "cover_gemms.sh: $PLAN renders an op it cannot bench: $op" >&2; exit 2 ;;
  esac
done

render() (            # a subshell: the first failing render ends it, non-zero; prints the ids
  set -e -f           # -f: a plan's args are split on spaces but never globbed (--scope tp=[8,16])
  local r op id base args shapes got
  for r in "${RENDERS[@]}"; do
    read -r op id base args <<< "$r"
    shapes=$SKINNY_SHAPES
    [ "$op" = gemm_situ_and_mul ] && shapes=$SITU_SHAPES
    shapes="shapes=$("$PY" -c "import json,sys; print(json.dumps(sys.argv[1].split(',')))" "$shapes")"
    # shellcheck disable=SC2086
    got=$("$PY" scripts/render_variant.py "$op" "$base" $args --scope "$shapes" --out "$ROOT_DIR")
    if [ "$got" != "$id" ]; then
      echo "cover_gemms.sh: $op $base $args rendered $got, not the plan's $id: a template changed;" \
           "update $PLAN" >&2
      exit 3
    fi
    echo "$id"
  done
)

missing() {            # the expected folders a render has not made (a stale id means a template changed)
  local id
  for id in "${SKINNY_IDS[@]}"; do [ -d "$ROOT_DIR/skinny_gemm/$id" ] || echo "skinny_gemm/$id"; done
  for id in "${SITU_IDS[@]}"; do [ -d "$ROOT_DIR/gemm_situ_and_mul/$id" ] || echo "gemm_situ_and_mul/$id"; done
}

prefixes() { local IFS=,; echo "${*}"; }

bench() {
  local gone
  if [ "$ROOT_DIR" != kernels_generated ]; then
    echo "cover_gemms.sh: bench times the candidates under kernels_generated; unset RENDER_ROOT" >&2
    return 2
  fi
  gone=$(missing | tr '\n' ' ')
  if [ -n "$gone" ]; then
    echo "cover_gemms.sh: no candidate folder for ${gone% }; run 'bash scripts/gpu/cover_gemms.sh render' here first" >&2
    return 2
  fi
  : "${OUT:?export OUT, the output folder of the device call}"
  step() { local name=$1 limit=$2; shift 2; echo "== $(date -u +%T) $name"
           timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; echo "   rc=$? $(tail -1 "$OUT/$name.log")"; }
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/gpu.txt" 2>&1
  echo "plan: $PLAN (${#SKINNY_IDS[@]} skinny_gemm renders, ${#SITU_IDS[@]} gemm_situ_and_mul)"
  if [ ${#SKINNY_IDS[@]} -gt 0 ]; then
    step bench_cover_skinny 400 "$PY" scripts/gpu/bench_kernels.py --ops skinny_gemm --tps "$SKINNY_TPS" \
      --batches "$SKINNY_BATCHES" --shapes "$SKINNY_SHAPES" --skip-points "$SKINNY_SKIP" \
      --candidates "$(prefixes "${SKINNY_IDS[@]}" "${SKINNY_ALSO[@]}")" \
      --no-compile-baseline --no-eager --rounds 3 --step-deadline-s 90
    mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_cover_skinny.json" 2>/dev/null
  fi
  if [ ${#SITU_IDS[@]} -gt 0 ]; then
    step bench_cover_gemm_situ 110 "$PY" scripts/gpu/bench_kernels.py --ops gemm_situ_and_mul --tps 8,16 \
      --batches 1,8 --shapes "$SITU_SHAPES" --candidates "$(prefixes "${SITU_IDS[@]}")" \
      --no-compile-baseline --no-eager --rounds 3 --step-deadline-s 60
    mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_cover_gemm_situ.json" 2>/dev/null
  fi
  mkdir -p "$COVER_DIR" && cp "$OUT"/bench_cover_*.json "$COVER_DIR"/ 2>/dev/null   # for gate, call 2
  winners "$OUT" > "$OUT/propose.txt" 2>&1
  cat "$OUT/propose.txt"
  ls "$OUT"
}

winners() {            # pick_winner's proposal from the bench JSONs in $1 (extra args: --write FILE); non-zero if one fails
  local dir=$1; shift
  if [ -f "$dir/bench_cover_skinny.json" ]; then
    "$PY" scripts/gpu/pick_winner.py "$dir/bench_cover_skinny.json" skinny_gemm cublas --per-shape --propose \
      --exclude-shapes "$SKINNY_EXCLUDE" "$@" || return
  fi
  if [ -f "$dir/bench_cover_gemm_situ.json" ]; then
    local bar=unfused                    # bench_kernels.py's bar column; "cublas+situ" before session 52
    grep -q '"cublas+situ"' "$dir/bench_cover_gemm_situ.json" && bar=cublas+situ
    "$PY" scripts/gpu/pick_winner.py "$dir/bench_cover_gemm_situ.json" gemm_situ_and_mul "$bar" \
      --per-shape --propose "$@" || return
  fi
}

candidates() { ls -d kernels_generated/skinny_gemm/*/ kernels_generated/gemm_situ_and_mul/*/ 2>/dev/null | sort; }

propose() {            # the winners of COVER_DIR's benches into human_candidates.json, rendered; prints the new OP/IDs
  local before
  if [ ! -f "$COVER_DIR/bench_cover_skinny.json" ] && [ ! -f "$COVER_DIR/bench_cover_gemm_situ.json" ]; then
    echo "cover_gemms.sh: no bench results in $COVER_DIR (bench keeps them there; set COVER_DIR)" >&2
    return 2
  fi
  if [ ${#SKINNY_ALSO[@]} -gt 0 ]; then
    echo "cover_gemms.sh: $PLAN times promoted kernels beside its renders (SKINNY_ALSO): a winner there must" \
         "beat them, not cuBLAS, so pick_winner cannot propose it; narrow a render by hand (harness narrow)" >&2
    return 2
  fi
  before=$(candidates)
  winners "$COVER_DIR" --write prompts/kernels/human_candidates.json >&2 || return 3
  "$PY" prompts/kernels/render_human.py --op skinny_gemm >&2 && "$PY" prompts/kernels/render_human.py \
    --op gemm_situ_and_mul >&2 || return 3
  comm -13 <(echo "$before") <(candidates) | sed 's#^kernels_generated/##; s#/$##'
}

gate() {
  local new
  : "${OUT:?export OUT, the output folder of the device call}"
  new=$(propose) || return $?
  cp prompts/kernels/human_candidates.json "$OUT"/
  echo "$new" > "$OUT/new_ids.txt"
  if [ -z "$new" ]; then echo "cover_gemms.sh: no new candidate won; nothing to gate"; return 0; fi
  # the renders as gated, for `adopt` here: rendering them again would stamp another created_utc
  # into candidate.json, and the gate records pin the candidate's files by hash
  # shellcheck disable=SC2086
  tar -cJf "$OUT/new_candidates.tar.xz" -C kernels_generated $new || return 3
  echo "new candidates: $(echo $new)"
  # shellcheck disable=SC1091
  source scripts/gpu/at_head.sh || return 3           # the tree with the renders, committed: /tmp/head
  # shellcheck disable=SC2086
  PHASE=perf bash scripts/gpu/regate.sh $new
  # Then the other gates for those that passed it, when the call has time left for them (one
  # candidate's checks took 164 s in session 33; several run side by side) and llguidance is there
  # (carry .whl too: numerics_model's structured-output run needs it). GATE_DEADLINE_S: seconds
  # from this script's start the call may use (default 580 of a device call's 600).
  local passed left
  passed=$(perf_passed "$OUT/regate_perf.txt")
  left=$(( ${GATE_DEADLINE_S:-580} - SECONDS ))
  if [ -z "$passed" ]; then echo "no new candidate passed perf_sweep"; return 0; fi
  if ! python3 -c "import llguidance" 2>/dev/null; then
    echo "checks not run: llguidance missing (carry .whl); run PHASE=checks regate.sh $(echo $passed)"; return 0
  fi
  if [ "$left" -lt 200 ]; then
    echo "checks not run: ${left} s left of the call; run PHASE=checks regate.sh $(echo $passed)"; return 0
  fi
  # shellcheck disable=SC2086
  PHASE=checks timeout "$left" bash scripts/gpu/regate.sh $passed
}

adopt() {             # call 2's renders byte for byte, with its human_candidates.json; prints the OP/IDs
  local tarball=$COVER_DIR/new_candidates.tar.xz tmp d rel clash='' ids=''
  for d in new_candidates.tar.xz human_candidates.json; do
    if [ ! -f "$COVER_DIR/$d" ]; then
      echo "cover_gemms.sh: no $COVER_DIR/$d (cover_gemms.sh gate writes it into \$OUT; set COVER_DIR)" >&2
      return 2
    fi
  done
  # the call's list must extend this one: it was this list, plus the winners appended
  "$PY" - "$COVER_DIR/human_candidates.json" prompts/kernels/human_candidates.json <<'PY' || return 3
import json, sys
call, here = (json.load(open(p))["candidates"] for p in sys.argv[1:3])
if call[:len(here)] != here:
    sys.exit("cover_gemms.sh: prompts/kernels/human_candidates.json changed since the gate call's tree; "
             "adopt would drop that change")
PY
  tmp=$(mktemp -d) || return 3
  tar -xJf "$tarball" -C "$tmp" || { rm -rf "$tmp"; return 3; }
  for d in "$tmp"/*/*/; do
    [ -d "$d" ] || continue                           # an empty tarball: nothing to adopt
    rel=${d#"$tmp"/}; rel=${rel%/}; ids+=" $rel"
    if [ -e "kernels_generated/$rel" ] && ! diff -rq --exclude=evidence --exclude=__pycache__ \
         "$tmp/$rel" "kernels_generated/$rel" > /dev/null; then clash+=" kernels_generated/$rel"; fi
  done
  if [ -n "$clash" ]; then
    echo "cover_gemms.sh: ${clash# } already there and not the gated files; move it away to adopt" >&2
    rm -rf "$tmp"; return 3
  fi
  for rel in $ids; do
    if [ ! -e "kernels_generated/$rel" ]; then mkdir -p "kernels_generated/${rel%/*}" && cp -r "$tmp/$rel" "kernels_generated/$rel"; fi
  done
  rm -rf "$tmp"
  cp "$COVER_DIR/human_candidates.json" prompts/kernels/human_candidates.json
  for rel in $ids; do echo "$rel"; done
}

perf_passed() {        # the OP/IDs a regate_perf.txt summary shows passing perf_sweep
  awk '/^#### /{c=$2} /^ *PASS +perf_sweep/{if (c) print c; c=""}' "$1" 2>/dev/null
}

case "${1:-}" in
  render) render ;;
  bench) bench ;;
  missing) missing ;;
  propose) propose ;;
  adopt) adopt ;;
  perf-passed) perf_passed "${2:?a regate_perf.txt}" ;;
  gate) gate ;;
  plan) echo "$PLAN" ;;
  *) echo "usage: bash scripts/gpu/cover_gemms.sh render|bench|gate|adopt|propose|missing|plan" >&2; exit 2 ;;
esac
