"""scripts/archive_evidence.py: a superseded candidate's records move into results/ as .xz copies
that decompress to the same bytes; a promoted candidate's records stay."""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
from gpu_scripts import tool_script


@pytest.fixture(scope="module")
def ae():
    return tool_script("archive_evidence")


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for cid in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        ev = root / "kernels_generated" / "op_a" / cid / "evidence"
        ev.mkdir(parents=True)
        (ev.parent / "kernel.py").write_text("# k\n")
        for stamp in ("20261129T000000.1Z-vm", "20261130T000000.2Z-vm"):
            rec = ev / f"{stamp}.json"
            rec.write_text(json.dumps({"candidate_id": cid, "stamp": stamp, "pad": "x" * 5000}))
            rec.chmod(0o444)                                   # as harness writes them
    (root / "kernels_generated" / "promoted.json").write_text(json.dumps(
        [{"op": "op_a", "candidate": "bbbbbbbbbbbb", "scope": {}}]))
    return root


def test_superseded_records_move_byte_for_byte(ae, tmp_path):
    root = _repo(tmp_path)
    originals = {p.name: p.read_bytes() for p in (root / "kernels_generated/op_a/aaaaaaaaaaaa/evidence").iterdir()}
    done = ae.archive(root, "op_a", "aaaaaaaaaaaa")
    assert sorted(a.record.name for a in done) == sorted(originals)
    assert not list((root / "kernels_generated/op_a/aaaaaaaaaaaa/evidence").glob("*.json"))
    for a in done:
        assert a.archive == root / "results/evidence_archive/op_a/aaaaaaaaaaaa" / (a.record.name + ".xz")
        assert lzma.decompress(a.archive.read_bytes()) == originals[a.record.name]
        assert a.bytes_after < a.bytes_before


def test_promoted_and_unknown_candidates_are_refused(ae, tmp_path):
    root = _repo(tmp_path)
    with pytest.raises(ValueError, match="is promoted"):
        ae.archive(root, "op_a", "bbbbbbbbbbbb")
    with pytest.raises(ValueError, match="no such candidate"):
        ae.archive(root, "op_a", "cccccccccccc")
    assert len(list((root / "kernels_generated/op_a/bbbbbbbbbbbb/evidence").glob("*.json"))) == 2


def test_dry_run_changes_nothing(ae, tmp_path):
    root = _repo(tmp_path)
    done = ae.archive(root, "op_a", "aaaaaaaaaaaa", dry_run=True)
    assert len(done) == 2 and not (root / "results").exists()
    assert len(list((root / "kernels_generated/op_a/aaaaaaaaaaaa/evidence").glob("*.json"))) == 2


class _Gate:
    def __init__(self, gate: str):
        self.gate = gate


class _Rec:
    def __init__(self, gates: list[str], stale: bool):
        self.gates = [_Gate(g) for g in gates]
        self.stale = stale


def _fake_evidence(monkeypatch, recs: dict[str, _Rec]):
    """Records by file name; the hash check is each record's `stale` flag."""
    from harness import evidence as ev

    def records(root, op, cid):
        folder = root / "kernels_generated" / op / cid / "evidence"
        return [(folder / f"{name}.json", recs[name]) for name in sorted(recs)]

    monkeypatch.setattr(ev, "records", records)
    monkeypatch.setattr(ev, "current_pins", lambda root, op, cid: {})
    monkeypatch.setattr(ev, "stale_reasons",
                        lambda rec, now: {g.gate: ["perf_sweep code hash differs"] if rec.stale else [] for g in rec.gates})


def test_stale_archives_superseded_records_of_a_promoted_candidate(ae, tmp_path, monkeypatch):
    root = _repo(tmp_path)
    _fake_evidence(monkeypatch, {
        "20261129T000000.1Z-vm": _Rec(["static", "perf_sweep"], stale=True),   # old full run
        "20261130T000000.2Z-vm": _Rec(["static", "perf_sweep"], stale=False),  # its re-gate
    })
    folder = root / "kernels_generated/op_a/bbbbbbbbbbbb/evidence"
    old = (folder / "20261129T000000.1Z-vm.json").read_bytes()
    done = ae.archive(root, "op_a", "bbbbbbbbbbbb", stale_only=True)
    assert [a.record.name for a in done] == ["20261129T000000.1Z-vm.json"]
    assert lzma.decompress(done[0].archive.read_bytes()) == old
    assert [p.name for p in folder.glob("*.json")] == ["20261130T000000.2Z-vm.json"]


def test_stale_keeps_a_record_that_is_the_only_one_of_a_gate(ae, tmp_path, monkeypatch):
    root = _repo(tmp_path)
    _fake_evidence(monkeypatch, {
        "20261129T000000.1Z-vm": _Rec(["static", "perf_sweep"], stale=True),   # perf not re-run yet
        "20261130T000000.2Z-vm": _Rec(["static"], stale=False),
    })
    assert ae.archive(root, "op_a", "bbbbbbbbbbbb", stale_only=True) == []
    assert len(list((root / "kernels_generated/op_a/bbbbbbbbbbbb/evidence").glob("*.json"))) == 2
