"""scripts/land_evidence.py: device records land in the right candidate's evidence folder,
one commit per candidate, once."""
from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def le():
    spec = importlib.util.spec_from_file_location("land_evidence", ROOT / "scripts/land_evidence.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@x", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_records_land_once_in_their_candidate(le, tmp_path):
    repo = tmp_path / "repo"
    for op, cid in (("op_a", "aaaaaaaaaaaa"), ("op_b", "bbbbbbbbbbbb")):
        (repo / "kernels_generated" / op / cid).mkdir(parents=True)
        (repo / "kernels_generated" / op / cid / "kernel.py").write_text("# k\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    out = tmp_path / "out"
    rec = "20261130T020316.149373Z-vm.json"
    (out / "aaaaaaaaaaaa").mkdir(parents=True)
    (out / "aaaaaaaaaaaa" / rec).write_text('{"gate": "perf_sweep"}\n')
    (out / "aaaaaaaaaaaa" / "gate_report.json").write_text("{}\n")      # not evidence
    (out / "aaaaaaaaaaaa" / "assess.json").write_text("{}\n")
    (out / "cccccccccccc").mkdir()                                      # no record: skipped

    landed = le.land(out, repo)
    assert landed == [("op_a", "aaaaaaaaaaaa", [rec])]
    ev = repo / "kernels_generated/op_a/aaaaaaaaaaaa/evidence"
    assert sorted(p.name for p in ev.iterdir()) == [rec]
    assert (ev / rec).stat().st_mode & 0o777 == 0o644
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "log", "-1", "--format=%s").startswith("op_a aaaaaaaaaaaa: gate evidence")
    assert le.land(out, repo) == []                                     # idempotent

    (repo / "stray.txt").write_text("x\n")
    with pytest.raises(SystemExit, match="uncommitted"):
        le.land(out, repo)


def test_promote_takes_every_gated_candidate_not_yet_promoted(le, tmp_path):
    """Session 54: the records landed, promote refused them (a candidate.json differed), and after the
    mend a second run landed nothing new; --promote must still try those candidates, and leave out
    one that promoted.json already names."""
    repo = tmp_path / "repo"
    for op, cid in (("op_a", "aaaaaaaaaaaa"), ("op_a", "bbbbbbbbbbbb"), ("op_b", "cccccccccccc")):
        (repo / "kernels_generated" / op / cid).mkdir(parents=True)
        (repo / "kernels_generated" / op / cid / "kernel.py").write_text("# k\n")
    (repo / "kernels_generated" / "promoted.json").write_text('[{"op": "op_a", "candidate": "bbbbbbbbbbbb", "scope": {}}]\n')
    out = tmp_path / "out"
    for cid in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"):
        (out / cid).mkdir(parents=True)
        (out / cid / "20261206T013940.703876Z-vm.json").write_text("{}\n")
    (out / "dddddddddddd").mkdir()                                       # no record: not gated here
    (out / "logs").mkdir()
    assert le.gated(out, repo) == [("op_a", "aaaaaaaaaaaa"), ("op_a", "bbbbbbbbbbbb"), ("op_b", "cccccccccccc")]
    assert le.to_promote(out, repo) == [("op_a", "aaaaaaaaaaaa"), ("op_b", "cccccccccccc")]
