"""scripts/gpu/at_head.sh, sourced on the device before a gate: it commits the arriving tree as a
one-commit history (isolation's base). Candidate folders that travelled untracked (scratch renders for
a study) would go into that base; with slim_tree.sh's .slim_tracked it names them, and with
AT_HEAD_STRICT=1 it refuses. Run here in a scratch tree, with setup.sh stubbed."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "at_head.sh"
TRACKED = "kernels_generated/op/aaa111/candidate.json"
SCRATCH = "kernels_generated/op/bbb222/candidate.json"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    t = tmp_path / "arrived"
    for rel, text in {TRACKED: "{}", SCRATCH: "{}", "scripts/gpu/setup.sh": "true\n", "keep.py": "k = 1\n"}.items():
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        (t / rel).write_text(text)
    shutil.copy(SCRIPT, t / "scripts/gpu/at_head.sh")
    (t / ".device").mkdir()
    (t / ".whl").mkdir()
    return t


def _source(tree: Path, dst: Path, strict: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "AT_HEAD_DIR": str(dst), "AT_HEAD_STRICT": "1" if strict else "0"}
    cmd = 'source scripts/gpu/at_head.sh; rc=$?; echo "rc=$rc pwd=$PWD"; git ls-files 2>/dev/null || true'
    return subprocess.run(["bash", "-c", cmd], cwd=tree, env=env, capture_output=True, text=True, timeout=60)


def test_names_untracked_candidate_folders_and_still_snapshots(tree: Path, tmp_path: Path):
    (tree / ".slim_tracked").write_text(f"keep.py\nscripts/gpu/at_head.sh\nscripts/gpu/setup.sh\n{TRACKED}\n")
    dst = tmp_path / "head"
    r = _source(tree, dst)
    assert "1 candidate folder(s) travelled untracked" in r.stderr
    assert "kernels_generated/op/bbb222" in r.stderr and "aaa111" not in r.stderr
    assert f"rc=0 pwd={dst}" in r.stdout and SCRATCH in r.stdout        # as before: it is in the snapshot


def test_strict_refuses_before_building_anything(tree: Path, tmp_path: Path):
    (tree / ".slim_tracked").write_text(f"keep.py\n{TRACKED}\n")
    dst = tmp_path / "head"
    r = _source(tree, dst, strict=True)
    assert "rc=1" in r.stdout and "refusing" in r.stderr and not dst.exists()


def test_quiet_when_every_candidate_is_tracked_or_no_list_came(tree: Path, tmp_path: Path):
    (tree / ".slim_tracked").write_text(f"keep.py\n{TRACKED}\n{SCRATCH}\n")
    r = _source(tree, tmp_path / "h1", strict=True)
    assert "rc=0" in r.stdout and "untracked" not in r.stderr
    (tree / ".slim_tracked").unlink()                                   # an unslimmed tree: nothing to compare
    r = _source(tree, tmp_path / "h2", strict=True)
    assert "rc=0" in r.stdout and "untracked" not in r.stderr
