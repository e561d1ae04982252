# Source on the lent GPU machine, from the checkout's root, instead of setup.sh when the run
# must see exactly the committed HEAD with a git history (the device copy's .git has no commits):
#   here:    commit everything (`git status --porcelain` empty): the tree that travels is HEAD
#   device:  source scripts/gpu/at_head.sh && <command>        (carry: .device, .whl)
# Copies the tree as it arrived into /tmp/head, links .device and .whl, commits it as branch
# main (one snapshot commit: isolation's base, --promote's HEAD), cds there, sources setup.sh.
# A .snap/head.tgz (`git archive --format=tar.gz -o .snap/head.tgz HEAD`, carried as .snap) is
# extracted instead, for a tree with work in progress; it rarely fits the 64 MiB carry now.
# Untracked candidate folders (scratch renders for a study, travelling with the call) are copied
# too, so they would sit in isolation's base. When the tree was slimmed (slim_tree.sh's
# .slim_tracked lists the tracked files) they are named on stderr, and with AT_HEAD_STRICT=1 the
# snapshot is refused: `AT_HEAD_STRICT=1 source scripts/gpu/at_head.sh` before gating candidates
# committed here (cover_gemms.sh's call 2 renders on the device and does not set it).
# AT_HEAD_DIR: where the snapshot is built (default /tmp/head; tests use a scratch directory).
_src=$PWD
_dst=${AT_HEAD_DIR:-/tmp/head}
if [ -f "$_src/.slim_tracked" ] && [ ! -f "$_src/.snap/head.tgz" ]; then
  _untracked=$(find kernels_generated -name candidate.json 2>/dev/null | LC_ALL=C sort \
    | LC_ALL=C comm -23 - <(LC_ALL=C sort "$_src/.slim_tracked") | sed 's|/candidate.json$||')
  if [ -n "$_untracked" ]; then
    echo "at_head.sh: $(echo "$_untracked" | wc -l) candidate folder(s) travelled untracked and would go into the snapshot:" \
      "$(echo "$_untracked" | head -5 | tr '\n' ' ')" >&2
    if [ "${AT_HEAD_STRICT:-0}" = 1 ]; then
      echo "at_head.sh: AT_HEAD_STRICT=1: refusing; delete them (rm -rf ...) or commit them here first" >&2
      return 1
    fi
  fi
fi
rm -rf "$_dst" && mkdir -p "$_dst" || return 1
if [ -f "$_src/.snap/head.tgz" ]; then
  tar xzf "$_src/.snap/head.tgz" -C "$_dst" || return 1
else
  tar cf - --exclude=./.device --exclude=./.whl --exclude=./.git --exclude=./.snap . | tar xf - -C "$_dst" || return 1
fi
ln -s "$_src/.device" "$_dst/.device" && ln -s "$_src/.whl" "$_dst/.whl"
cd "$_dst" || return 1
git init -q -b main && git add -A && git -c user.name=harness-device -c user.email=device@localhost \
  commit -qm "device snapshot of HEAD" || return 1
git config user.name harness-device && git config user.email device@localhost
source scripts/gpu/setup.sh
