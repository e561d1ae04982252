"""scripts/gpu/regate.sh, the re-gate of many candidates in one device session, run here on the CPU
(the GPU gates report NOT_RUN): each candidate is gated in a worktree of at_head.sh's snapshot as
the PR that adds its folder, its records come back in one archive rewritten after every candidate,
and the script refuses to gate from any other git history (session 12 once gated the device
copy's old .git, i.e. the old gate code, because at_head.sh had run in a background subshell)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/gpu/regate.sh"
CID = "59ea067f1155"                        # situ_and_mul's promoted kernel: the quickest to compile
MISSING = "0123456789ab"                    # no such candidate: gate.sh gives no verdict for it


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def _run(cwd: Path, tmp: Path, *specs: str, phase: str = "checks") -> subprocess.CompletedProcess:
    env = {**os.environ, "PHASE": phase, "OUT": str(tmp / "out"), "REGATE_TMP": str(tmp / "t"),
           "HARNESS_CACHE": str(tmp / "cache")}
    return subprocess.run(["bash", str(SCRIPT), *specs], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _snapshot(tmp: Path, message: str = "device snapshot of HEAD") -> Path:
    """What at_head.sh builds: the tracked tree, committed once as main, with a .device link
    (here to a stub whose cutedsl/setup.sh does nothing)."""
    head = tmp / "head"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        if (ROOT / rel).is_file():
            (head / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, head / rel)
    stub = tmp / "device_stub" / "cutedsl"
    stub.mkdir(parents=True)
    (stub / "setup.sh").write_text("true\n")
    (head / ".device").symlink_to(stub.parent)
    _git(head, "init", "-q", "-b", "main")
    _git(head, "add", "-A")
    _git(head, "commit", "-qm", message)
    return head


def test_usage_errors_are_plain_messages(tmp_path):
    res = _run(ROOT, tmp_path, phase="both")
    assert res.returncode == 2 and "PHASE must be checks or perf" in res.stderr
    res = _run(ROOT, tmp_path)
    assert res.returncode == 2 and "usage" in res.stderr


def test_refuses_a_history_that_is_not_the_snapshot(tmp_path):
    head = _snapshot(tmp_path, message="someone's own history")
    res = _run(head, tmp_path, f"situ_and_mul/{CID}")
    assert res.returncode == 3 and "not at_head.sh's snapshot" in res.stderr
    assert not (tmp_path / "t" / "wt").exists()                       # nothing was gated


def test_checks_phase_refuses_to_start_without_llguidance(tmp_path):
    """numerics_model's structured-output run needs llguidance: without it (the .whl site not
    carried) every record would FAIL, so the checks phase stops before gating anything."""
    head = _snapshot(tmp_path)
    broken = tmp_path / "no_llguidance"
    broken.mkdir()
    (broken / "llguidance.py").write_text("raise ImportError('not installed on this machine')\n")
    env_path = f"{broken}:{os.environ.get('PYTHONPATH', '')}"
    env = {**os.environ, "PHASE": "checks", "OUT": str(tmp_path / "out"), "REGATE_TMP": str(tmp_path / "t"),
           "PYTHONPATH": env_path}
    res = subprocess.run(["bash", str(SCRIPT), f"situ_and_mul/{CID}"], cwd=head, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 4 and "llguidance is not importable" in res.stderr
    assert not (tmp_path / "t" / "wt").exists()                       # nothing was gated
    env["PHASE"] = "perf"                                             # perf_sweep does not need it: gets past the check
    res = subprocess.run(["bash", str(SCRIPT), f"situ_and_mul/{MISSING}"], cwd=head, env=env, capture_output=True,
                         text=True, timeout=600)
    assert "llguidance" not in res.stderr


@pytest.mark.slow
def test_checks_phase_gates_in_a_worktree_and_archives_the_record(tmp_path):
    head = _snapshot(tmp_path)
    res = _run(head, tmp_path, f"situ_and_mul/{CID}", f"situ_and_mul/{MISSING}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "== gate code " in res.stdout
    with tarfile.open(tmp_path / "out" / "regate_checks.tar.xz") as tar:
        names = tar.getnames()
        records = [n for n in names if n.startswith(f"checks/{CID}/2") and n.endswith(".json")]
        assert len(records) == 1, names
        rec = json.load(tar.extractfile(records[0]))
        report = json.load(tar.extractfile(f"checks/{CID}/gate_report.json"))
    verdicts = {g["gate"]: g["verdict"] for g in rec["gates"]}
    # every gate of the phase ran; the CPU reports the GPU gates NOT_RUN, never PASS
    assert verdicts == {"isolation": "pass", "static": "pass", "scope": "pass",
                        "numerics_unit": "not_run", "numerics_model": "not_run"}
    assert report["gates"][0]["numbers"]["outside_paths"] == []      # the PR adds only its folder
    assert "perf_sweep" not in verdicts
    # gated as a PR on its own branch in the worktree; the snapshot's main is untouched and clean
    assert _git(head, "log", "-1", "--format=%s", f"gate/{CID}") == f"evidence for {CID}"
    assert _git(head, "status", "--porcelain") == ""
    assert _git(head, "log", "-1", "--format=%s", "main") == "device snapshot of HEAD"
    summary = (tmp_path / "out" / "regate_checks.txt").read_text()
    assert summary.count("PASS     isolation") == 1
    # one section per candidate, in the order given; one without verdict lines says so
    assert summary.index(f"#### situ_and_mul/{CID}") < summary.index(f"#### situ_and_mul/{MISSING}")
    assert summary.split(f"#### situ_and_mul/{MISSING}")[1].strip().startswith(("(no verdict yet)", "== "))
