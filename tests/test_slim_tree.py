"""scripts/gpu/slim_tree.sh: `on` commits the removal of results/ and docs/ on a throwaway branch
(the device call's tree without them), `off` restores the branch it came from, in a scratch repo."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "slim_tree.sh"
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@x"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


def _slim(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/gpu/slim_tree.sh", *args], cwd=repo, env=ENV, capture_output=True,
                          text=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    r = tmp_path / "r"
    for rel, text in {"results/h200/a.json": "{}", "docs/x.md": "x", "keep.py": "k = 1\n"}.items():
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        (r / rel).write_text(text)
    (r / "scripts/gpu").mkdir(parents=True)
    shutil.copy(SCRIPT, r / "scripts/gpu/slim_tree.sh")
    _git(r, "init", "-q", "-b", "main")
    _git(r, "add", "-A")
    _git(r, "commit", "-qm", "init")
    return r


def test_on_removes_results_and_docs_on_a_branch_and_off_restores(repo: Path):
    head = _git(repo, "rev-parse", "HEAD")
    on = _slim(repo, "on")
    assert on.returncode == 0, on.stderr
    assert not (repo / "results").exists() and not (repo / "docs").exists() and (repo / "keep.py").is_file()
    assert _git(repo, "branch", "--show-current").strip() == "gpu-slim"
    assert _git(repo, "status", "--porcelain") == ""            # committed: at_head.sh sees a clean tree
    off = _slim(repo, "off")
    assert off.returncode == 0, off.stderr
    assert (repo / "results/h200/a.json").read_text() == "{}" and (repo / "docs/x.md").is_file()
    assert _git(repo, "branch", "--show-current").strip() == "main"
    assert _git(repo, "rev-parse", "HEAD") == head
    assert "gpu-slim" not in _git(repo, "branch")


def test_named_paths_only(repo: Path):
    assert _slim(repo, "on", "docs").returncode == 0
    assert (repo / "results/h200/a.json").is_file() and not (repo / "docs").exists()
    assert _slim(repo, "off").returncode == 0 and (repo / "docs/x.md").is_file()


def test_refuses_a_dirty_tree_and_a_double_on_and_off_when_not_on(repo: Path):
    (repo / "keep.py").write_text("k = 2\n")
    r = _slim(repo, "on")
    assert r.returncode == 2 and "commit or stash" in r.stderr
    assert _git(repo, "branch", "--show-current").strip() == "main"
    _git(repo, "checkout", "-q", "keep.py")
    assert _slim(repo, "off").returncode == 2
    assert _slim(repo, "on").returncode == 0
    again = _slim(repo, "on")
    assert again.returncode == 2 and "already on" in again.stderr
    assert _slim(repo, "off").returncode == 0
    assert _slim(repo, "bogus").returncode == 2


def test_commits_on_the_slim_branch_are_refused_until_off(repo: Path):
    hook = repo / ".git" / "hooks" / "pre-commit"
    assert _slim(repo, "on").returncode == 0 and hook.is_file()
    (repo / "keep.py").write_text("k = 2\n")
    _git(repo, "add", "keep.py")
    refused = subprocess.run(["git", "commit", "-qm", "edit"], cwd=repo, env=ENV, capture_output=True, text=True)
    assert refused.returncode != 0 and "slim_tree.sh off" in refused.stderr
    assert _git(repo, "log", "-1", "--format=%s").startswith("slim tree")     # nothing committed on gpu-slim
    assert _slim(repo, "off").returncode == 0 and not hook.exists()
    assert (repo / "keep.py").read_text() == "k = 2\n"                          # the edit carried over
    _git(repo, "commit", "-qm", "edit")                                          # ... and commits on main
    assert _git(repo, "branch", "--show-current").strip() == "main"


def test_a_repositorys_own_hook_is_left_alone(repo: Path):
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    on = _slim(repo, "on")
    assert on.returncode == 0 and "no commit guard" in on.stderr
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
    assert _slim(repo, "off").returncode == 0 and hook.read_text() == "#!/bin/sh\nexit 0\n"


def test_untracked_scratch_files_stay_and_travel_but_not_under_the_slimmed_paths(repo: Path):
    """Scratch candidates (untracked) need not be moved aside: they stay through on / off. An
    untracked file under results/ would travel too and defeat the slimming: refused."""
    scratch = repo / "kernels_generated" / "op" / "abc" / "kernel.py"
    scratch.parent.mkdir(parents=True)
    scratch.write_text("x = 1\n")
    on = _slim(repo, "on")
    assert on.returncode == 0, on.stderr
    assert scratch.is_file() and not (repo / "results").exists()
    assert _git(repo, "status", "--porcelain") == "?? kernels_generated/\n"
    assert _slim(repo, "off").returncode == 0 and scratch.is_file()
    stray = repo / "results" / "new.json"
    stray.write_text("{}")
    refused = _slim(repo, "on")
    assert refused.returncode == 2 and "results/new.json" in refused.stderr
    assert _git(repo, "branch", "--show-current").strip() == "main"


def test_on_lists_the_tracked_files_for_at_head(repo: Path):
    """The slim commit carries .slim_tracked: the files tracked on gpu-slim (not the slimmed paths, not
    untracked scratch), so at_head.sh on the device can tell which candidate folders travelled untracked.
    `off` takes it away with the branch."""
    scratch = repo / "kernels_generated" / "op" / "abc" / "candidate.json"
    scratch.parent.mkdir(parents=True)
    scratch.write_text("{}")
    assert _slim(repo, "on").returncode == 0
    listed = (repo / ".slim_tracked").read_text().split()
    assert "keep.py" in listed and "scripts/gpu/slim_tree.sh" in listed
    assert not any(p.startswith(("results/", "docs/", "kernels_generated/")) for p in listed)
    assert ".slim_tracked" in _git(repo, "ls-files")                 # committed: the tree stays clean
    assert _slim(repo, "off").returncode == 0 and not (repo / ".slim_tracked").exists()
