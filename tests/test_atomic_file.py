"""harness/atomic_file.py: a file replaced whole, with the mode it should keep."""
from __future__ import annotations

import stat

import pytest

from harness.atomic_file import replacing


def test_a_body_that_raises_leaves_the_target_and_no_temp_file(tmp_path):
    target = tmp_path / "page.html"
    target.write_text("old")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("died mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]


def test_an_explicit_mode_wins_over_the_targets(tmp_path):
    target = tmp_path / "page.html"
    target.write_text("old")
    target.chmod(0o600)
    with replacing(target, mode=0o644) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o644
