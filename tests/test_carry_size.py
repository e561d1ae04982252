"""scripts/gpu/carry_size.py: what a device call sends (tracked + untracked-not-ignored files and
each carried path), against the 64 MiB cap less a margin."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cs():
    spec = importlib.util.spec_from_file_location("carry_size", ROOT / "scripts/gpu/carry_size.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["carry_size"] = mod
    spec.loader.exec_module(mod)
    return mod


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text("/.device/\n")
    (root / "tracked.bin").write_bytes(b"t" * 3000)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    (root / "untracked.bin").write_bytes(b"u" * 500)               # travels: not ignored
    (root / ".device").mkdir()
    (root / ".device" / "ir.so.xz").write_bytes(b"d" * 7000)        # travels only when carried
    return root


def test_tree_counts_tracked_and_untracked_not_ignored(cs, tmp_path):
    root = _repo(tmp_path)
    assert dict(cs.parts(root, [])) == {"tracked + untracked-not-ignored": 3000 + 500 + len("/.device/\n")}
    assert dict(cs.parts(root, [".device"]))[".device"] == 7000
    with pytest.raises(SystemExit, match="does not exist"):
        cs.parts(root, [".whl"])


def test_over_the_cap_less_the_margin_exits_1(cs, tmp_path, monkeypatch, capsys):
    root = _repo(tmp_path)
    monkeypatch.setattr(cs, "ROOT", root)
    monkeypatch.setattr(cs, "CAP_BYTES", cs.MARGIN_BYTES + 12_000)
    assert cs.main([".device"]) == 0                   # 10,510 bytes: fits
    (root / ".device" / "more").write_bytes(b"m" * 2000)
    assert cs.main([".device"]) == 1                   # 12,510 bytes: over
    assert "OVER by" in capsys.readouterr().out
