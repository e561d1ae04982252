"""harness.paths: which checkout a command works on, and the note when it is not the one you are in."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import paths

ROOT = Path(__file__).resolve().parents[1]


def _checkout(at: Path) -> Path:
    (at / "harness").mkdir(parents=True)
    (at / "harness" / "__init__.py").write_text("")
    (at / "kernels_generated").mkdir()
    return at


def test_checkout_of_walks_up(tmp_path):
    co = _checkout(tmp_path / "other")
    (co / "kernels_generated" / "op").mkdir()
    assert paths.checkout_of(co / "kernels_generated" / "op") == co
    assert paths.checkout_of(tmp_path) is None


def test_note_only_inside_another_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_ROOT", raising=False)
    co = _checkout(tmp_path / "other")
    note = paths.other_checkout_note(co)
    assert note and str(co) in note and "HARNESS_ROOT" in note
    assert paths.other_checkout_note(tmp_path) is None                 # not in a checkout
    assert paths.other_checkout_note(paths.root()) is None             # in the one it works on
    monkeypatch.setenv("HARNESS_ROOT", str(co))
    assert paths.other_checkout_note(co) is None                       # chosen explicitly


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P needs 3.11")
def test_the_cli_prints_the_note_on_stderr(tmp_path):
    co = _checkout(tmp_path / "other")
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_ROOT"}
    # -P: the fake checkout's empty harness/ must not shadow the installed package
    res = subprocess.run([sys.executable, "-P", "-m", "harness.cli", "ops", "--json"], cwd=co, env=env,
                         capture_output=True, text=True, timeout=120)
    assert "harness: note:" in res.stderr and str(co) in res.stderr
    assert res.returncode == 0, res.stderr
    assert "harness: note:" not in res.stdout and res.stdout.lstrip().startswith("[")   # --json stays clean
