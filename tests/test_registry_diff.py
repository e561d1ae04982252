"""scripts/registry_diff.py: the registry's decisions compared between two checkouts."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpu_scripts import tool_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def diff():
    return tool_script("registry_diff")


def _copy_checkout(dest: Path) -> Path:
    """The two packages the recording imports, copied (without caches) to `dest`."""
    for pkg in ("harness", "reference_impls"):
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_compare_names_every_differing_record_and_a_missing_tail(diff):
    mine = [["a", 1], ["b", 2], ["c", 3]]
    theirs = [["a", 1], ["b", 9]]
    got = diff.compare(mine, theirs)
    assert [d["index"] for d in got] == [1, 2]
    assert got[0]["other"] == ["b", 9] and got[1]["other"] is None


def test_an_identical_copy_matches_on_calls_that_reach_the_kernel_and_fall_back(diff, tmp_path, capsys):
    other = _copy_checkout(tmp_path / "copy")
    assert diff.main([str(other), "--ops", "add_rmsnorm", "--points", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["differences"] == 0
    assert report["records"] > 20 and report["kernel_calls"] > 0


def test_a_changed_routing_decision_is_reported(diff, tmp_path, capsys):
    """A registry whose batch check names the wrong reason: the same calls fall back, but the
    counters differ, and the script says where."""
    other = _copy_checkout(tmp_path / "changed")
    reg = other / "harness" / "registry.py"
    src = reg.read_text()
    assert "return Reason.BATCH" in src
    reg.write_text(src.replace("return Reason.BATCH", "return Reason.TP", 1))
    assert diff.main([str(other), "--ops", "add_rmsnorm", "--points", "3", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["differences"] > 0
    first = report["first"][0]
    assert ["fallback", "batch", 1] in first["this"][7] and ["fallback", "tp", 1] in first["other"][7]


def test_an_unknown_other_or_op_is_a_readable_error(diff, tmp_path):
    with pytest.raises(SystemExit, match="neither a checkout"):
        diff.main([str(tmp_path / "nowhere"), "--ops", "add_rmsnorm"])
    with pytest.raises(SystemExit):
        diff.main(["HEAD", "--ops", "no_such_op"])


def test_a_git_revision_is_checked_out_for_the_run_and_removed_after(diff, capsys):
    import subprocess

    def worktrees() -> str:
        return subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"],
                              capture_output=True, text=True, check=True).stdout

    before = worktrees()
    code = diff.main(["HEAD", "--ops", "rmsnorm", "--points", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and report["records"] > 0
    assert worktrees() == before
