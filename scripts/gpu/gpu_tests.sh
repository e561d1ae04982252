#!/usr/bin/env bash
# Run the whole GPU test suite (`pytest -m gpu`) in one device call, on the lent GPU machine,
# from the checkout's root (carry .device and .whl):
#   source scripts/gpu/setup.sh && export HARNESS_CACHE=/tmp/k3c && export OUT && \
#     JOBS=8 timeout 570 bash scripts/gpu/gpu_tests.sh [pytest args, e.g. a path or -k EXPR]
# One pytest run of every GPU test, one after the other, takes ~15 minutes from a cold compile
# cache: past the 10 minutes a device call may run (sessions 27-29 each ran part of it). Most of
# that is CuTe DSL compiling on one CPU core, so this script
#   1. runs the tests whose assertions read GPU time (TIMING below) alone first: a timing test
#      beside other GPU work would measure that work too;
#   2. splits every other GPU test round-robin over JOBS pytest processes that run at once
#      (the compile cache is written by atomic rename, so they share it safely).
# Each pytest is stopped by SIGINT at DEADLINE_S (default 500 s from its start; keep it under the
# call's limit) so that it still writes its JUnit report of the tests it finished.
# Writes $OUT/gpu_tests/{timing,group<N>}.{log,xml} and summary.txt (passed / failed / errors /
# skipped per run, every failing test id, and as NOT FINISHED every collected test that no report
# names: its group was stopped first). Exits non-zero unless every collected test ran, none
# failed and at least one passed (all skipped: no GPU was seen). PACK=1 then replaces the folder's
# files by gpu_tests.tar.xz beside summary.txt: a device call brings back only a few loose files
# (session 30's first run returned 8 of 34).
set -uo pipefail
JOBS="${JOBS:-8}"
DEADLINE_S="${DEADLINE_S:-500}"
START=$(date +%s)
DEST="${OUT:-.}/gpu_tests"
mkdir -p "$DEST"
TIMING=(
  tests/gates/test_layer_ab.py::test_graph_replays_on_a_gpu_and_see_gpu_time
  tests/toolchain/test_cli_and_gpu.py::test_timing_interleaves_and_measures_bandwidth
  tests/test_diag_probe.py::test_a_kernel_against_its_own_copy_reads_one
)
PY="${PYTHON:-python3}"

"$PY" -m pytest -q -m gpu --collect-only "$@" 2>/dev/null | grep '::' > "$DEST/all_ids.txt"
grep -v -F -x -f <(printf '%s\n' "${TIMING[@]}") "$DEST/all_ids.txt" > "$DEST/rest_ids.txt"
echo "$(wc -l < "$DEST/all_ids.txt") GPU tests collected; $JOBS parallel groups after the timing tests"

timing_ids=()
for t in "${TIMING[@]}"; do grep -q -F -x "$t" "$DEST/all_ids.txt" && timing_ids+=("$t"); done
if [ "${#timing_ids[@]}" -gt 0 ]; then
  timeout -s INT "$DEADLINE_S" "$PY" -m pytest -q -m gpu -p no:cacheprovider --durations=10 \
    --junitxml="$DEST/timing.xml" "${timing_ids[@]}" \
    > "$DEST/timing.log" 2>&1
  tail -n 3 "$DEST/timing.log"
fi

left=$((DEADLINE_S - ($(date +%s) - START)))
for g in $(seq 0 $((JOBS - 1))); do
  awk -v n="$JOBS" -v g="$g" '(NR - 1) % n == g' "$DEST/rest_ids.txt" > "$DEST/group$g.ids"
  if [ -s "$DEST/group$g.ids" ]; then
    mapfile -t ids < "$DEST/group$g.ids"
    timeout -s INT "$left" "$PY" -m pytest -q -m gpu -p no:cacheprovider --durations=10 \
      --junitxml="$DEST/group$g.xml" "${ids[@]}" \
      > "$DEST/group$g.log" 2>&1 &
  fi
done
wait

rc=0
"$PY" - "$DEST" <<'EOF' || rc=$?
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

dest = Path(sys.argv[1])
lines, total, bad = [], {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}, []
reported = set()                  # (classname, name) of every test case a JUnit report names
for xml in sorted(dest.glob("*.xml")):
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in total}
    for k in total:
        total[k] += counts[k]
    lines.append(f"{xml.stem}: {counts['tests']} tests, {counts['failures']} failed, {counts['errors']} errors, "
                 f"{counts['skipped']} skipped, {float(suite.get('time', 0)):.0f} s")
    for case in suite.iter("testcase"):
        reported.add((case.get("classname"), case.get("name")))
        if case.find("failure") is not None or case.find("error") is not None:
            bad.append(f"{case.get('classname')}::{case.get('name')}")
for ids in sorted(dest.glob("group*.ids")):
    if ids.stat().st_size and not ids.with_suffix(".xml").exists():
        lines.append(f"{ids.stem}: no report (stopped before pytest wrote one; see {ids.stem}.log)")
all_ids = [line.strip() for line in open(dest / "all_ids.txt") if line.strip()]
collected = len(all_ids)
# a test collected but in no report: its group was stopped (deadline) before the test finished
def junit_key(test_id: str) -> tuple[str, str]:
    """'tests/a/test_b.py::TestC::test_d[x]' -> ('tests.a.test_b.TestC', 'test_d[x]'), JUnit's names."""
    path, *inner, name = test_id.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *inner]), name


unfinished = [i for i in all_ids if junit_key(i) not in reported]
passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
lines.append(f"all: {collected} collected, {total['tests']} ran: {passed} passed, {total['failures']} failed, "
             f"{total['errors']} errors, {total['skipped']} skipped")
lines += [f"FAILED {b}" for b in bad]
lines += [f"NOT FINISHED {u} (its group stopped before it ended: raise DEADLINE_S or run it alone)" for u in unfinished]
(dest / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
ok = total["tests"] == collected and not bad and total["failures"] + total["errors"] == 0 and passed > 0
sys.exit(0 if ok else 1)
EOF
if [ "${PACK:-0}" = 1 ]; then
  tar cJf "$DEST.tar.xz" -C "$(dirname "$DEST")" "$(basename "$DEST")" && cp "$DEST/summary.txt" "$DEST.summary.txt" \
    && rm -rf "$DEST" && mkdir -p "$DEST" && mv "$DEST.summary.txt" "$DEST/summary.txt" && mv "$DEST.tar.xz" "$DEST/"
fi
exit "$rc"
