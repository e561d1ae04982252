"""scripts/gpu/pack_out.sh: a device call's $OUT comes back whole (at most 8 files, 2 folders down,
plain names), else packed into one out.tar.xz."""
from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "pack_out.sh"


def _run(out: Path, *args: str, env_out: bool = False) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, OUT=str(out)) if env_out else {k: v for k, v in os.environ.items() if k != "OUT"}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _unpacked(out: Path, dest: Path) -> dict[str, str]:
    with tarfile.open(out / "out.tar.xz") as t:
        t.extractall(dest, filter="data")
    return _files(dest)


def test_eight_plain_files_stay_as_they_are(tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    want = {f"f{i}.log": f"line {i}" for i in range(7)} | {"sub/run.json": "{}"}
    for name, text in want.items():
        (out / name).write_text(text)
    r = _run(out, env_out=True)
    assert r.returncode == 0, r.stderr
    assert _files(out) == want and "come back as they are" in r.stdout


def test_a_ninth_file_packs_everything(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    want = {f"bench_{i}.json": f"{{\"i\": {i}}}" for i in range(9)}
    for name, text in want.items():
        (out / name).write_text(text)
    r = _run(out, str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["out.tar.xz"]
    assert _unpacked(out, tmp_path / "back") == want
    assert "9 file(s)" in r.stdout


def test_a_file_too_deep_or_oddly_named_packs_too(tmp_path):
    for case, rel in (("deep", "a/b/c/res.txt"), ("odd", "res (1).txt")):
        out = tmp_path / case
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(case)
        (out / "gpu.txt").write_text("H200")
        assert _run(out, str(out)).returncode == 0
        assert [p.name for p in out.iterdir()] == ["out.tar.xz"], case
        assert _unpacked(out, tmp_path / f"back_{case}") == {rel: case, "gpu.txt": "H200"}


def test_no_folder_is_an_error(tmp_path):
    r = _run(tmp_path / "missing", str(tmp_path / "missing"))
    assert r.returncode == 2 and "is not a folder" in r.stderr
    r = _run(tmp_path)                                   # neither an argument nor OUT
    assert r.returncode != 0 and "give a folder or set OUT" in r.stderr
