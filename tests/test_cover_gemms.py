"""scripts/gpu/cover_gemms.sh: the next device call's GEMM-coverage bench. Its candidate ids are
hard-coded (the bench names them); these tests keep them equal to what its render step makes, so a
template change shows up here and not as a refused device call."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/gpu/cover_gemms.sh"


def _run(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env})


def test_render_makes_exactly_the_folders_bench_times(tmp_path):
    r = _run("render", RENDER_ROOT=str(tmp_path))
    assert r.returncode == 0, r.stderr
    ids = r.stdout.split()                              # four skinny_gemm renders, then three gemm_situ_and_mul
    made = {f"{p.parent.name}/{p.name}" for p in tmp_path.glob("*/*") if p.is_dir()}
    assert made == {f"skinny_gemm/{i}" for i in ids[:4]} | {f"gemm_situ_and_mul/{i}" for i in ids[4:]}
    assert len(made) == 7
    assert _run("missing", RENDER_ROOT=str(tmp_path)).stdout == ""      # the hard-coded ids are these
    skinny = json.loads((tmp_path / "skinny_gemm" / ids[0] / "candidate.json").read_text())
    assert len(skinny["scope"]["shapes"]) == 10 and skinny["scope"]["batch"] == [1, 8]
    assert not {"latent_down", "latent_up", "mla_qkv_a"} & set(skinny["scope"]["shapes"])   # promoted kernels run those
    situ = json.loads((tmp_path / "gemm_situ_and_mul" / ids[4] / "candidate.json").read_text())
    assert situ["scope"]["shapes"] == ["dense_gate_up"]


def test_bench_refuses_before_any_gpu_work_without_its_candidates(tmp_path):
    r = _run("bench", cwd=tmp_path, OUT=str(tmp_path))
    assert r.returncode == 2 and "no candidate folder for skinny_gemm/ee9e383345ca" in r.stderr
    assert "render' here first" in r.stderr and list(tmp_path.iterdir()) == []
    r = _run("bench", RENDER_ROOT=str(tmp_path), OUT=str(tmp_path))
    assert r.returncode == 2 and "unset RENDER_ROOT" in r.stderr
    assert _run("nonsense").returncode == 2
