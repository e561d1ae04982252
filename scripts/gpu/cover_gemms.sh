#!/usr/bin/env bash
# The GEMMs no promoted kernel runs (session 47's coverage finding): skinny_gemm at the ten per-rank
# shapes outside 268009's and c8b7a7's scopes, and gemm_situ_and_mul at dense_gate_up. One device
# call times scoped renders of the promoted kernels there against what runs today (cuBLAS; for the
# fused op cuBLAS then the SiTU reference) and proposes the human candidates that win.
#
#   here:    bash scripts/gpu/cover_gemms.sh render        # the seven scratch candidates (untracked)
#            bash scripts/gpu/slim_tree.sh on results docs 'kernels_generated/*/*/evidence/*'
#   device:  carry [".device"] (the bench needs no .whl; slimmed with the seven renders, 60.3 MiB of 64):
#            source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && \
#              bash scripts/gpu/cover_gemms.sh bench
#   device:  call 2, within the warm machine's idle window (seconds) after call 1, carry [".device", ".whl"]:
#            source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && \
#              bash scripts/gpu/cover_gemms.sh gate
#            proposes and renders the winners from call 1's JSONs (kept in COVER_DIR, default
#            /tmp/cover) exactly as the next step does here, then runs the perf gate on the new
#            candidates (regate.sh PHASE=perf at at_head.sh's snapshot), then, time left, the other
#            gates (PHASE=checks) on those that passed: $OUT/regate_{perf,checks}.*,
#            $OUT/new_ids.txt, $OUT/human_candidates.json. Saves a cold start: a machine goes back
#            after ~30 s idle, so the commit below could not happen between the two calls.
#   here:    bash scripts/gpu/slim_tree.sh off; copy FILES_AT/* to results/<card: h200, h100>/<session>/;
#            python scripts/gpu/pick_winner.py <that>/bench_cover_skinny.json skinny_gemm cublas \
#              --per-shape --propose --exclude-shapes shared_gate_up --write prompts/kernels/human_candidates.json
#            (the same for bench_cover_gemm_situ.json, gemm_situ_and_mul, "unfused": "cublas+situ"
#            in runs before session 52), then
#            python prompts/kernels/render_human.py --op skinny_gemm, commit, and gate the new
#            candidates (PHASE=perf, then PHASE=checks: scripts/gpu/regate.sh's header).
#
# The renders (ids hash kernel.py and scope, so the same commands give the same folders):
#   skinny_gemm at the ten shapes, B 1..8, TP 8/16 (docs/HISTORY.md, session 47):
#     ee9e38 268009's params; 714b8a max_cluster 4; aa998e 268009's ALT plan as the main plan
#     (w4 u8 t396 cl8 ring); a4310c c8b7a7's 16-warp plan for all ten (outside the space).
#   gemm_situ_and_mul at dense_gate_up, B 1..8, TP 8/16 (session 48):
#     8a4514 497382's params (w2 u4 t528 cl8 ring bulk tma); f2a104 no cluster (w8 u8 t264);
#     ce2ec1 497382's ALT plan as the main plan (w4 u8 t264 cl4 ring bulk tma).
# Compile times on the H200 are ~1.2 s a (candidate, shape, TP) (session 33), so the skinny step's
# 80 compiles take under two minutes; its 40 timed points the rest.
# RENDER_ROOT: where render writes and missing looks (default kernels_generated, where bench looks; tests use
# a scratch root); PYTHON: the interpreter (default python3).
set -uo pipefail
PY=${PYTHON:-python3}
ROOT_DIR=${RENDER_ROOT:-kernels_generated}
COVER_DIR=${COVER_DIR:-/tmp/cover}    # bench copies its JSONs here; propose and gate read them (call 2)
SKINNY_SHAPES=kda_in_proj,kda_f_b,kda_o_proj,mla_q_b,mla_g_proj,mla_o_proj,shared_gate_up,shared_down,dense_gate_up,dense_down
SKINNY_IDS=(ee9e383345ca 714b8ad29be3 aa998eebb59c a4310c441db5)
SITU_IDS=(8a451464ad6f f2a104e5af12 ce2ec19d6e81)

render() (            # a subshell: the first failing render ends it, non-zero
  set -e
  local sh
  sh="shapes=$("$PY" -c "import json,sys; print(json.dumps(sys.argv[1].split(',')))" "$SKINNY_SHAPES")"
  rv() { "$PY" scripts/render_variant.py "$@" --out "$ROOT_DIR"; }
  rv skinny_gemm 268009 --scope "$sh"
  rv skinny_gemm 268009 --set max_cluster=4 --scope "$sh"
  rv skinny_gemm 268009 --set max_cluster=8 --set ring=true --set warps=4 --set unroll=8 --set ctas_target=396 \
    --scope "$sh"
  rv skinny_gemm 268009 --outside-space --set "alt_shapes=$SKINNY_SHAPES" --set alt_warps=16 --set alt_unroll=6 \
    --set alt_ctas_target=396 --set alt_max_cluster=1 --set alt_ring=false --scope "$sh"
  rv gemm_situ_and_mul 497382 --scope 'shapes=["dense_gate_up"]'
  rv gemm_situ_and_mul 497382 --set max_cluster=1 --set warps=8 --set unroll=8 --set ring=false --set bulk=false \
    --set tma=false --set ctas_target=264 --scope 'shapes=["dense_gate_up"]'
  rv gemm_situ_and_mul 497382 --set warps=4 --set unroll=8 --set ctas_target=264 --set max_cluster=4 --set ring=true \
    --scope 'shapes=["dense_gate_up"]'
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
  step bench_cover_skinny 400 "$PY" scripts/gpu/bench_kernels.py --ops skinny_gemm --tps 8,16 --batches 1,8 \
    --shapes "$SKINNY_SHAPES" --candidates "$(prefixes "${SKINNY_IDS[@]}")" \
    --no-compile-baseline --no-eager --rounds 3 --step-deadline-s 90
  mv "$OUT/bench_kernels_skinny_gemm.json" "$OUT/bench_cover_skinny.json" 2>/dev/null
  step bench_cover_gemm_situ 110 "$PY" scripts/gpu/bench_kernels.py --ops gemm_situ_and_mul --tps 8,16 \
    --batches 1,8 --shapes dense_gate_up --candidates "$(prefixes "${SITU_IDS[@]}")" \
    --no-compile-baseline --no-eager --rounds 3 --step-deadline-s 60
  mv "$OUT/bench_kernels_gemm_situ_and_mul.json" "$OUT/bench_cover_gemm_situ.json" 2>/dev/null
  mkdir -p "$COVER_DIR" && cp "$OUT"/bench_cover_*.json "$COVER_DIR"/ 2>/dev/null   # for gate, call 2
  winners "$OUT" > "$OUT/propose.txt" 2>&1
  cat "$OUT/propose.txt"
  ls "$OUT"
}

winners() {            # pick_winner's proposal from the bench JSONs in $1 (extra args: --write FILE); non-zero if one fails
  local dir=$1; shift
  if [ -f "$dir/bench_cover_skinny.json" ]; then
    "$PY" scripts/gpu/pick_winner.py "$dir/bench_cover_skinny.json" skinny_gemm cublas --per-shape --propose \
      --exclude-shapes shared_gate_up "$@" || return
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

perf_passed() {        # the OP/IDs a regate_perf.txt summary shows passing perf_sweep
  awk '/^#### /{c=$2} /^ *PASS +perf_sweep/{if (c) print c; c=""}' "$1" 2>/dev/null
}

case "${1:-}" in
  render) render ;;
  bench) bench ;;
  missing) missing ;;
  propose) propose ;;
  perf-passed) perf_passed "${2:?a regate_perf.txt}" ;;
  gate) gate ;;
  *) echo "usage: bash scripts/gpu/cover_gemms.sh render|bench|gate|propose|missing" >&2; exit 2 ;;
esac
