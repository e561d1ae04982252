"""Per-gate code pins (gates/pins.py) and what they make stale (harness/evidence.py)."""
from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import pytest

from gates import ALL_GATES, GateResult, Verdict, pins
from gates.pins import gate_code_pins, sha256_files
from harness import evidence as ev
from harness.pin_report import path_pins
from harness.promotion import assess

from gate_repo_helpers import NARROW_SCOPE, make_candidate

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "evidence" / "schema1_gemm_situ_and_mul_49738245078c.json.xz"


def _pinned(gate: str, root: Path = REPO) -> set[str]:
    return set(gate_code_pins(root, [gate])[gate].files)


def _code_hash(root: Path, gate: str) -> str:
    return gate_code_pins(root, [gate])[gate].code_sha256


def test_each_gate_pins_what_it_imports():
    perf, model, iso = _pinned("perf_sweep"), _pinned("numerics_model"), _pinned("isolation")
    # the modules session 27 found outside the old fixed list
    assert {"harness/toolchain/timing.py", "harness/model/decoder.py", "harness/model/graph.py",
            "harness/registry.py", "harness/toolchain/sandbox.py", "harness/toolchain/candidate.py"} <= perf
    assert {"harness/model/data/prompts.jsonl", "harness/model/data/schemas.json",
            "harness/model/grammar.py", "gates/_model_runs.py"} <= model
    # harness.toolchain's lazy `load_compiled` resolves through its _EXPORTS map to loader.py
    assert "harness/toolchain/loader.py" in _pinned("numerics_unit")
    assert "harness/compare.py" in _pinned("numerics_unit")
    assert {"gates/isolation.py", "gates/_git.py"} <= iso and "harness/toolchain/timing.py" not in iso
    for g in ALL_GATES:
        pins = _pinned(g.value)
        assert {f"gates/{g.value}.py", "gates/__init__.py", "gates/_isolated.py", "harness/evidence.py"} <= pins
        # judges and references are pinned elsewhere (or by their tests), never through gate code
        assert not any(p.startswith(("reference_impls/", "harness/dashboard/", "harness/agent/")) for p in pins)
        assert "harness/promotion.py" not in pins and "gates/suite.py" not in pins


def test_the_layer_ab_and_the_timing_are_pinned_by_perf_sweep_alone():
    """The per-layer A/B lives apart from gates/_k3.py, which numerics_model imports too."""
    paths = ("gates/_layer_ab.py", "harness/toolchain/timing.py", "gates/_k3.py")
    got = path_pins(REPO, [str(REPO / p) for p in paths])
    assert {p.path: p.gates for p in got} == {"gates/_layer_ab.py": ["perf_sweep"],
                                              "harness/toolchain/timing.py": ["perf_sweep"],
                                              "gates/_k3.py": ["numerics_model", "perf_sweep"]}


def test_each_gate_hashes_its_files_in_path_order():
    for gate, c in gate_code_pins(REPO).items():
        assert list(c.files) == sorted(c.files) and set(c.file_sha256) == set(c.files)
        assert c.code_sha256 == sha256_files([REPO / f for f in c.files], REPO), gate


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        _write(root, rel, text)


def test_closure_follows_relative_lazy_and_function_level_imports(tmp_path):
    _tree(tmp_path, {
        "gates/__init__.py": "", "gates/_isolated.py": "", "harness/__init__.py": "", "harness/evidence.py": "",
        "gates/mygate.py": "from . import _helper\n\ndef run():\n    from harness.lazy import thing\n",
        "gates/_helper.py": "from ..harness import nothing_here\nimport harness.deep.mod\n",
        "harness/deep/__init__.py": "", "harness/deep/mod.py": "", "harness/deep/data/table.json": "{}",
        "harness/lazy/__init__.py": "_EXPORTS = {'thing': 'impl', 'other': 'unused'}\n\ndef __getattr__(name):\n    pass\n",
        "harness/lazy/impl.py": "", "harness/lazy/unused.py": "", "harness/unrelated.py": ""})
    got = _pinned("mygate", tmp_path)
    assert got == {"gates/__init__.py", "gates/_isolated.py", "gates/mygate.py", "gates/_helper.py",
                   "harness/__init__.py", "harness/evidence.py", "harness/deep/__init__.py",
                   "harness/deep/mod.py", "harness/deep/data/table.json", "harness/lazy/__init__.py",
                   "harness/lazy/impl.py"}
    h = _code_hash(tmp_path, "mygate")
    _write(tmp_path, "harness/unrelated.py", "x = 1\n")
    assert _code_hash(tmp_path, "mygate") == h
    _write(tmp_path, "harness/lazy/impl.py", "x = 1\n")
    assert _code_hash(tmp_path, "mygate") != h
    _write(tmp_path, "gates/_helper.py", "import harness.unrelated\n")         # a new import is pinned at once
    assert "harness/unrelated.py" in _pinned("mygate", tmp_path)


def test_lazy_package_without_exports_map_pins_every_submodule(tmp_path):
    _tree(tmp_path, {"gates/__init__.py": "", "gates/g.py": "from harness.lazy import anything\n",
                     "harness/__init__.py": "", "harness/lazy/__init__.py": "def __getattr__(name):\n    pass\n",
                     "harness/lazy/a.py": "", "harness/lazy/b.py": ""})
    assert {"harness/lazy/a.py", "harness/lazy/b.py"} <= _pinned("g", tmp_path)


def test_a_warm_call_reads_no_gate_file_and_an_edit_is_seen_at_once(repo, monkeypatch):
    """The dashboard asks for the pins of every candidate: after one call, the next (for another
    candidate) reads, hashes and parses no gate file. An edit is seen by the very next call, which
    reads only the files that changed or were not pinned before."""
    root, cid = repo
    other = make_candidate(root, scope={**NARROW_SCOPE, "batch": [1, 4]})
    reads: list[str] = []
    parses: list[str] = []
    read, parse = pins._read, pins._parse
    monkeypatch.setattr(pins, "_read", lambda p: reads.append(p.relative_to(root).as_posix()) or read(p))
    monkeypatch.setattr(pins, "_parse", lambda p, data: parses.append(p.relative_to(root).as_posix()) or parse(p, data))
    before = ev.current_pins(root, "moe_router", cid)
    assert "harness/toolchain/timing.py" in reads and "gates/perf_sweep.py" in parses
    reads.clear()
    parses.clear()
    again = ev.current_pins(root, "moe_router", other)
    assert reads == [] and parses == []
    assert (again.gate_code, again.gate_files, again.gate_code_files) == \
        (before.gate_code, before.gate_files, before.gate_code_files)
    timing = root / "harness" / "toolchain" / "timing.py"
    assert "harness/pin_report.py" not in before.gate_files["perf_sweep"]
    mtime = timing.stat().st_mtime_ns
    timing.write_text(timing.read_text() + "\nimport harness.pin_report\n")
    os.utime(timing, ns=(mtime + 10**9, mtime + 10**9))
    now = ev.current_pins(root, "moe_router", other)
    assert sorted(reads) == sorted(parses) == ["harness/pin_report.py", "harness/toolchain/timing.py"]
    assert "harness/pin_report.py" in now.gate_files["perf_sweep"]
    assert now.gate_code_files["harness/toolchain/timing.py"] != before.gate_code_files["harness/toolchain/timing.py"]
    assert now.gate_code["perf_sweep"] != before.gate_code["perf_sweep"]
    assert now.gate_code["isolation"] == before.gate_code["isolation"]


def _results(root: Path, cid: str) -> list[GateResult]:
    from test_promotion import _passing_results

    return _passing_results(root, cid)


def _standing(root: Path, cid: str) -> dict[str, bool]:
    (path, rec), = ev.records(root, "moe_router", cid)
    return {g: not why for g, why in ev.stale_reasons(rec, ev.current_pins(root, "moe_router", cid)).items()}


def test_an_edit_stales_only_the_gates_that_import_it(repo):
    root, cid = repo
    rec = ev.build(root, "moe_router", cid, _results(root, cid), 1, hardware={})
    assert all(g.code_sha256 == _code_hash(root, g.gate) for g in rec.gates)
    assert set(rec.gate_code_files) == {p for g in ALL_GATES for p in _pinned(g.value, root)}
    ev.write(rec, root)
    assert all(_standing(root, cid).values())
    timing = root / "harness" / "toolchain" / "timing.py"
    timing.write_text(timing.read_text() + "\n# an edit\n")
    standing = _standing(root, cid)
    assert not standing["perf_sweep"]
    assert standing["isolation"] and standing["static"] and standing["scope"] and standing["numerics_unit"]
    assert standing["numerics_model"]               # the timing is perf_sweep's alone (gates/_layer_ab.py)
    problems = assess(root, "moe_router", cid).problems
    assert any("gate perf_sweep: evidence is stale: perf_sweep code hash differs" in p
               and "changed: harness/toolchain/timing.py" in p for p in problems)
    assert not any("gate isolation" in p for p in problems)
    # an edit to a judge stales nothing
    prom = root / "harness" / "promotion.py"
    prom.write_text(prom.read_text() + "\n# a judge's edit\n")
    assert _standing(root, cid)["isolation"]


def test_stale_message_quotes_the_newest_record(repo):
    root, cid = repo
    ev.write(ev.build(root, "moe_router", cid, _results(root, cid), 1, hardware={}), root)
    cfg = root / "gates" / "gate_config.toml"
    cfg.write_text(cfg.read_text() + "\n")
    ev.write(ev.build(root, "moe_router", cid, _results(root, cid), 1, hardware={}), root)
    newest_cfg = ev.current_pins(root, "moe_router", cid).hashes.gate_config
    k = root / "gates" / "perf_sweep.py"
    k.write_text(k.read_text() + "\n# edit\n")
    cfg.write_text(cfg.read_text() + "\n")
    problems = [p for p in assess(root, "moe_router", cid).problems if "gate perf_sweep" in p]
    assert len(problems) == 1 and f"evidence {newest_cfg[:12]}" in problems[0]


def test_schema1_record_loads_and_every_verdict_is_stale(tmp_path):
    data = json.loads(lzma.decompress(FIXTURE.read_bytes()))
    assert data["schema"] == 1 and "gate_code" in data["hashes"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(data))
    rec = ev.load(p)                      # its record_sha256 still verifies under the schema 2 code
    assert rec.to_dict() == data
    pins = ev.current_pins(REPO, rec.op, rec.candidate_id)
    reasons = ev.stale_reasons(rec, pins)
    assert set(reasons) == {g.gate for g in rec.gates}
    assert all(any("record schema 1" in r for r in why) for why in reasons.values())
    data["gates"][0]["numbers"]["forged"] = 1
    p.write_text(json.dumps(data))
    with pytest.raises(ev.EvidenceError, match="record_sha256"):
        ev.load(p)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["gates"][0].pop("code_sha256"), "code_sha256 missing"),
    (lambda d: d["gates"][0].__setitem__("code_sha256", "x" * 64), "malformed"),
    (lambda d: d["hashes"].__setitem__("gate_code", "0" * 64), "have 'gate_code'"),
    (lambda d: d.pop("gate_code_files"), "gate_code_files"),
    (lambda d: d["gate_code_files"].__setitem__("gates/x.py", "nope"), "gate_code_files entry"),
])
def test_schema2_record_shape_is_enforced(repo, tmp_path, edit, needle):
    root, cid = repo
    data = ev.build(root, "moe_router", cid, _results(root, cid), 1, hardware={}).to_dict()
    assert data["schema"] == 2 and ev.from_dict(json.loads(json.dumps(data)))
    edit(data)
    with pytest.raises(ev.EvidenceError, match=needle):
        ev.from_dict(data)


def test_a_record_writes_only_its_gates_pinned_files(repo):
    root, cid = repo
    only_iso = [r for r in _results(root, cid) if r.gate == "isolation"]
    rec = ev.build(root, "moe_router", cid, only_iso, 1, hardware={})
    assert set(rec.gate_code_files) == _pinned("isolation", root)
    assert [g.gate for g in rec.gates] == ["isolation"] and rec.gates[0].verdict == Verdict.PASS.value


def test_a_same_size_edit_with_its_mtime_set_back_is_seen(repo):
    """A tool that preserves times (or `touch -d`) can give an edited file its old mtime and, for
    a one-character change, its old size: the ctime still moves, and so does the pin."""
    root, cid = repo
    timing = root / "harness" / "toolchain" / "timing.py"
    before = ev.current_pins(root, "moe_router", cid)
    st = timing.stat()
    text = timing.read_text()
    i = text.index("median")
    timing.write_text(text[:i] + "mediaN" + text[i + 6:])           # same length, other bytes
    os.utime(timing, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (timing.stat().st_mtime_ns, timing.stat().st_size) == (st.st_mtime_ns, st.st_size)
    now = ev.current_pins(root, "moe_router", cid)
    assert now.gate_code["perf_sweep"] != before.gate_code["perf_sweep"]
    assert now.gate_code["isolation"] == before.gate_code["isolation"]
