#!/usr/bin/env bash
# Make a device call's $OUT come back whole. A call returns at most 8 files, each at most 2
# folders down and named in letters, digits, '.', '_' and '-' alone (/work/.library/device/README.md);
# the rest is left out silently but for a line in the reply (session 38's call 1 wrote 11 files and
# lost the small ops' benchmark JSON). When DIR breaks any of those rules this packs everything in
# it into DIR/out.tar.xz and removes the originals; otherwise it leaves DIR alone.
#
#   bash scripts/gpu/pack_out.sh [DIR]        # DIR defaults to $OUT
#   trap 'bash scripts/gpu/pack_out.sh' EXIT  # at the top of a call script: runs however it ends
#
# Unpack here with: tar -C DEST -xJf /work/.device/N/out.tar.xz
set -euo pipefail
dir="${1:-${OUT:?pack_out.sh: give a folder or set OUT}}"
max_files="${PACK_MAX_FILES:-8}"
[ -d "$dir" ] || { echo "pack_out.sh: $dir is not a folder" >&2; exit 2; }
cd "$dir"
files=$(find . -mindepth 1 \( -type f -o -type l \) | wc -l)
deep=$(find . -mindepth 4 | wc -l)                              # ./a/b/c/file: 3 folders down
odd=$(find . -mindepth 1 -name '*[!A-Za-z0-9._-]*' | wc -l)
if [ "$files" -le "$max_files" ] && [ "$deep" -eq 0 ] && [ "$odd" -eq 0 ]; then
  echo "pack_out.sh: $files file(s) in $dir come back as they are"
  exit 0
fi
tmp=$(mktemp -d)
tar -cJf "$tmp/out.tar.xz" .
find . -mindepth 1 -delete
mv "$tmp/out.tar.xz" out.tar.xz && rmdir "$tmp"
echo "pack_out.sh: $files file(s) in $dir ($deep too deep, $odd oddly named) packed into out.tar.xz"
