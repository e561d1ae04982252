#!/usr/bin/env bash
# Where one kernel's warps stall, per SASS instruction: ncu's PC sampling of one launch of one
# candidate at one point (run_once.py checks that call against the reference first).
#
#   source scripts/gpu/setup.sh && bash scripts/gpu/profile_source.sh OP ID KERNEL_REGEX TAG [run_once args...]
#   e.g. bash scripts/gpu/profile_source.sh kda_decode 72d7b8 KdaDecode kda_b1_fp32 --batch 1 --state-dtype fp32
#
# Writes under $OUT (or ./profile_out): TAG_{cold,warm}.ncu-rep (cold: ncu flushes every cache
# before the launch; warm: no flush, so inputs made by the previous call may sit in L2), the
# per-instruction source page of each as CSV (SASS with its stall-reason samples) and the
# details page as text, and TAG.tar.xz of the text files (the device tool returns few files).
# Clocks are left at the GPU's own (--clock-control none). SAMPLING (default 0) is ncu's PC
# sampling interval: 2^(5 + SAMPLING) cycles, so 0 samples every 32 cycles.
set -euo pipefail
op=$1 id=$2 regex=$3 tag=$4
shift 4
out=${OUT:-./profile_out}
mkdir -p "$out"
ncu=${NCU:-/usr/local/cuda/bin/ncu}
for mode in cold warm; do
  cache=all
  [ "$mode" = warm ] && cache=none
  "$ncu" --target-processes all -k "regex:$regex" --launch-skip 1 --launch-count 1 \
    --cache-control "$cache" --clock-control none \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
    --warp-sampling-interval "${SAMPLING:-0}" \
    -f -o "$out/${tag}_$mode" python3 scripts/gpu/run_once.py "$op" "$id" --calls 2 "$@"
  "$ncu" -i "$out/${tag}_$mode.ncu-rep" --page details > "$out/${tag}_$mode.txt" 2>&1 || true
  "$ncu" -i "$out/${tag}_$mode.ncu-rep" --page source --print-source sass --csv \
    > "$out/${tag}_${mode}_sass.csv" 2>&1 || true
done
(cd "$out" && tar cJf "$tag.tar.xz" "${tag}"_*.txt "${tag}"_*_sass.csv)
