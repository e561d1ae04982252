"""scripts/gpu/gate_pr.sh, the git half of gate.sh: each committed candidate is gated as the
pull request that adds exactly its folder, and after its gates the tree is clean again, so a
second candidate gated in the same command is judged on its own change only (an untracked
record of the first once failed the second's isolation gate)."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
A = "kernels_generated/op_a/aaaaaaaaaaaa"
B = "kernels_generated/op_b/bbbbbbbbbbbb"


def _sh(repo: Path, script: str) -> str:
    full = f"set -e; source '{ROOT / 'scripts/gpu/gate_pr.sh'}'; {script}"
    return subprocess.run(["bash", "-c", full], cwd=repo, check=True, capture_output=True, text=True).stdout


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for d in (A, B):
        (repo / d).mkdir(parents=True)
        (repo / d / "kernel.py").write_text(f"# {d}\n")
    (repo / "README.md").write_text("main\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@x", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "main with both candidates")
    return repo


def _gate(repo: Path, d: str, cid: str, record: str) -> list[str]:
    """begin, the paths the PR commit changes, a record written by 'the gates', end."""
    out = _sh(repo, f"gate_pr_begin {d} {cid}; git diff --name-only HEAD~1 HEAD; "
                    f"mkdir -p {d}/evidence; echo '{{}}' > {d}/evidence/{record}; gate_pr_end {d} {cid} main")
    return out.split()


def test_two_candidates_in_one_command_each_see_only_their_own_folder(tmp_path):
    repo = _repo(tmp_path)
    assert _gate(repo, A, "aaaaaaaaaaaa", "r1.json") == [f"{A}/kernel.py"]
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert _git(repo, "status", "--porcelain") == ""                      # A's record is not left behind
    assert _git(repo, "show", f"gate/aaaaaaaaaaaa:{A}/evidence/r1.json") == "{}"   # it is kept, committed

    assert _gate(repo, B, "bbbbbbbbbbbb", "r2.json") == [f"{B}/kernel.py"]   # nothing of A in B's PR
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "log", "-1", "--format=%s", "main") == "main with both candidates"


def test_a_split_gate_run_adds_its_record_to_the_first(tmp_path):
    """The second run of one candidate (GATE_ONLY=numerics_model) reuses its branch: the PR
    then carries the first record, and both records stay committed on the branch."""
    repo = _repo(tmp_path)
    _gate(repo, A, "aaaaaaaaaaaa", "r1.json")
    assert _gate(repo, A, "aaaaaaaaaaaa", "r2.json") == [f"{A}/evidence/r1.json", f"{A}/kernel.py"]
    files = _git(repo, "ls-tree", "-r", "--name-only", "gate/aaaaaaaaaaaa", "--", f"{A}/evidence").split()
    assert files == [f"{A}/evidence/r1.json", f"{A}/evidence/r2.json"]
    assert _git(repo, "status", "--porcelain") == ""
