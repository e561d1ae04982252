# Source on the lent GPU machine, from the checkout's root, instead of setup.sh when the run
# must see exactly the committed HEAD (not the working tree as copied, with others' work in
# progress), with a git history (the device copy's .git has no commits):
#   here:    mkdir -p .snap && git archive --format=tar.gz -o .snap/head.tgz HEAD
#   device:  source scripts/gpu/at_head.sh && <command>        (carry: .device, .whl, .snap)
# Extracts HEAD into /tmp/head, links .device and .whl, commits the tree as branch main
# (one snapshot commit: isolation's base, --promote's HEAD), cds there, sources setup.sh.
# Without .snap/head.tgz (the carry is capped at 64 MiB) it copies the tree as it arrived:
# then run it only from a clean checkout (`git status --porcelain` empty), where tree = HEAD.
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
