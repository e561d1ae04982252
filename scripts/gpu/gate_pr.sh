# Sourced by gate.sh: gate a candidate that is already committed on HEAD as the pull request
# that brings it. Plain git; tests/test_gate_pr.py runs it in a throwaway repository.
#
#   gate_pr_begin DIR CID   on branch gate/CID: a base commit without DIR, then a commit adding
#                           exactly DIR (the isolation gate diffs HEAD~1..HEAD); on a second
#                           call for CID its branch is reused (a split gate run adds records)
#   gate_pr_end DIR CID START
#                           commits the records the gates wrote under DIR/evidence on gate/CID
#                           and checks out START again, so the next candidate starts from a
#                           clean tree (an untracked record of the previous one once failed
#                           the next one's isolation gate as a change outside its folder)
_gate_git() { git -c user.name=gate -c user.email=gate@localhost "$@"; }

gate_pr_begin() {
  local dir=$1 cid=$2
  _gate_git checkout -q -b "gate/$cid" 2>/dev/null || git checkout -q "gate/$cid" || return 1
  git rm -rq "$dir" && _gate_git commit -qm "base: main without $cid" || return 1
  git checkout HEAD~1 -- "$dir" && _gate_git commit -qm "candidate $cid"
}

gate_pr_end() {
  local dir=$1 cid=$2 start=$3
  if [ -d "$dir/evidence" ] && [ -n "$(git status --porcelain -- "$dir/evidence")" ]; then
    git add -- "$dir/evidence" && _gate_git commit -qm "evidence for $cid" || return 1
  fi
  git checkout -q "$start"
}
