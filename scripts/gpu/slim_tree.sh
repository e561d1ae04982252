#!/usr/bin/env bash
# Make the working tree small enough to travel with `.device` to the lent GPU machine, and back.
#
#   bash scripts/gpu/slim_tree.sh on [PATH ...]     # default PATHs: results docs
#   ... the device call(s), carry [".device"] ...
#   bash scripts/gpu/slim_tree.sh off
#
# A device call sends the tracked and untracked-not-ignored files plus the carried paths, capped
# at 64 MiB; `.device` alone is 55.6 MiB, so the whole tree no longer fits beside it (session 15:
# refused at 63.34 MiB by scripts/gpu/carry_size.py's count). `on` needs no uncommitted change to a
# tracked file (untracked files outside PATHs, e.g. scratch candidates for a bench, stay and travel
# with the call; under PATHs they are refused, since they would travel too). It commits
# the removal of PATHs (nothing a benchmark or gate reads) on a branch `gpu-slim` made from HEAD,
# so scripts/gpu/at_head.sh still sees a committed tree, and prints the call's size; `off` checks
# the branch it came from out again and deletes `gpu-slim`. The slim commit adds `.slim_tracked` (the
# tracked files), from which scripts/gpu/at_head.sh tells which candidate folders travelled untracked. Commit what the call brought back
# (results/...) only after `off`. While it is on, a pre-commit hook (installed by `on` unless the
# repository has its own, removed by `off`) refuses commits on `gpu-slim`: work committed there
# would vanish with the branch at `off` (session 17 did that once and had to cherry-pick it back).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
state="$(git rev-parse --git-dir)/slim_tree_from"
hook="$(git rev-parse --git-path hooks/pre-commit)"
marker="# slim_tree.sh guard"
case "${1:-}" in
  on)
    shift
    [ -e "$state" ] && { echo "slim_tree.sh: already on (from $(cat "$state")); run 'off' first" >&2; exit 2; }
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "slim_tree.sh: commit or stash your changes first" >&2; exit 2; }
    paths=("$@")
    [ ${#paths[@]} -gt 0 ] || paths=(results docs)
    # untracked files elsewhere (scratch candidates for the bench) stay and travel with the call;
    # inside the slimmed paths they would travel too and defeat the slimming
    stray="$(git ls-files --others --exclude-standard -- "${paths[@]}")"
    [ -z "$stray" ] || { echo "slim_tree.sh: untracked files under ${paths[*]} would travel: $(echo "$stray" | head -3 | tr '\n' ' ')" >&2; exit 2; }
    from="$(git symbolic-ref --quiet --short HEAD || git rev-parse HEAD)"
    git checkout -q -b gpu-slim
    echo "$from" > "$state"
    git rm -rq -- "${paths[@]}"
    # the tracked files as they travel: at_head.sh names the candidate folders that travel untracked
    git ls-files > .slim_tracked && git add .slim_tracked
    git commit -qm "slim tree for a device call (without ${paths[*]})"
    if [ -e "$hook" ]; then
      echo "slim_tree.sh: $hook exists, so no commit guard: commit nothing until 'off'" >&2
    else
      mkdir -p "$(dirname "$hook")"
      printf '#!/bin/sh\n%s\nif [ "$(git symbolic-ref --quiet --short HEAD)" = gpu-slim ]; then\n  echo "slim_tree.sh is on: run bash scripts/gpu/slim_tree.sh off, then commit (your edits carry over)" >&2\n  exit 1\nfi\n' "$marker" > "$hook"
      chmod +x "$hook"
    fi
    echo "on: branch gpu-slim without ${paths[*]} (from $from)"
    if [ -f scripts/gpu/carry_size.py ]; then python3 scripts/gpu/carry_size.py .device || true; fi
    ;;
  off)
    [ -e "$state" ] || { echo "slim_tree.sh: not on" >&2; exit 2; }
    from="$(cat "$state")"
    git checkout -q "$from"
    git branch -q -D gpu-slim
    rm -f "$state"
    if [ -f "$hook" ] && grep -qF "$marker" "$hook"; then rm -f "$hook"; fi
    echo "off: back on $from"
    ;;
  *)
    echo "usage: slim_tree.sh on [PATH ...] | off" >&2; exit 2 ;;
esac
