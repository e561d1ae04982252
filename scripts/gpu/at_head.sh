# Source on the lent GPU machine, from the checkout's root, instead of setup.sh when the run
# must see exactly the committed HEAD with a git history (the device copy's .git has no commits):
#   here:    commit everything (`git status --porcelain` empty): the tree that travels is HEAD
#   device:  source scripts/gpu/at_head.sh && <command>        (carry: .device, .whl)
# Copies the tree as it arrived into /tmp/head, links .device and .whl, commits it as branch
# main (one snapshot commit: isolation's base, --promote's HEAD), cds there, sources setup.sh.
# A .snap/head.tgz (`git archive --format=tar.gz -o .snap/head.tgz HEAD`, carried as .snap) is
# extracted instead, for a tree with work in progress; it rarely fits the 64 MiB carry now.
_src=$PWD
rm -rf /tmp/head && mkdir -p /tmp/head || return 1
if [ -f "$_src/.snap/head.tgz" ]; then
  tar xzf "$_src/.snap/head.tgz" -C /tmp/head || return 1
else
  tar cf - --exclude=./.device --exclude=./.whl --exclude=./.git --exclude=./.snap . | tar xf - -C /tmp/head || return 1
fi
ln -s "$_src/.device" /tmp/head/.device && ln -s "$_src/.whl" /tmp/head/.whl
cd /tmp/head || return 1
git init -q -b main && git add -A && git -c user.name=harness-device -c user.email=device@localhost \
  commit -qm "device snapshot of HEAD" || return 1
git config user.name harness-device && git config user.email device@localhost
source scripts/gpu/setup.sh
