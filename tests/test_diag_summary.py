"""scripts/diag_summary.py: diag_probe records summarised per variant, and a plan's projected geomean."""
from __future__ import annotations

import importlib.util
import json
import lzma
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
S40 = ROOT / "results/h200/session40"


@pytest.fixture(scope="module")
def ds():
    spec = importlib.util.spec_from_file_location("diag_summary", ROOT / "scripts/diag_summary.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod              # dataclasses resolve their module's annotations
    spec.loader.exec_module(mod)
    return mod


def record(shape: str, rows: dict[int, dict[str, float]], wrong: set[str] = frozenset()) -> dict:
    """A record in diag_probe's layout: {batch: {variant: median_us}}."""
    names = list(next(iter(rows.values())))
    return {"op": "attn_res", "shape": shape, "tp": 8, "state_dtype": "", "rounds": 5, "gpu": "test",
            "kernels": {n: f"diag/{n}" for n in names},
            "rows": [{"batch": b, "tp": 8, "shape": shape, "n_sets": 4,
                      "variants": {n: {"ok": n not in wrong, "check": "-", "median_us": t, "vs_first": t / ts[names[0]]}
                                   for n, t in ts.items()}}
                     for b, ts in rows.items()]}


def write(path: Path, rec: dict, xz: bool = False) -> Path:
    raw = json.dumps(rec).encode()
    path.write_bytes(lzma.compress(raw) if xz else raw)
    return path


def test_ratios_are_within_a_row_and_geomeans_per_variant(ds, tmp_path):
    a = write(tmp_path / "a.json", record("nb1", {1: {"base": 2.0, "v": 1.0, "d": 4.0}, 8: {"base": 4.0, "v": 4.0, "d": 4.0}},
                                          wrong={"d"}))
    base, table = ds.ratios_by_point([ds.load_record(a)], None)
    assert base == "base" and set(table) == {("attn_res", 8, "nb1", "", 1), ("attn_res", 8, "nb1", "", 8)}
    by = {v.name: v for v in ds.summarise_variants(table)}
    assert by["v"].points == 2 and by["v"].geomean == pytest.approx(math.sqrt(0.5 * 1.0))
    assert (by["v"].low, by["v"].high, by["v"].wrong) == (0.5, 1.0, 0)
    assert by["d"].wrong == 2 and by["d"].geomean == pytest.approx(math.sqrt(2.0))


def test_a_later_record_replaces_only_the_variants_it_timed(ds, tmp_path):
    first = write(tmp_path / "1.json.xz", record("nb1", {16: {"base": 2.0, "x": 1.0, "y": 3.0}}), xz=True)
    later = write(tmp_path / "2.json", record("nb1", {16: {"base": 4.0, "x": 3.0}}))
    _, table = ds.ratios_by_point([ds.load_record(first), ds.load_record(later)], None)
    ents = table[("attn_res", 8, "nb1", "", 16)]
    assert ents["x"][0] == pytest.approx(0.75) and ents["y"][0] == pytest.approx(1.5)


def test_a_plan_takes_each_variant_over_its_batches(ds, tmp_path):
    rec = record("nb2", {1: {"base": 1.0, "s": 0.5, "l": 2.0}, 32: {"base": 1.0, "s": 0.8, "l": 2.0},
                         64: {"base": 1.0, "s": 2.0, "l": 0.9}})
    _, table = ds.ratios_by_point([rec], None)
    plan = ds.summarise_plan(table, ["s@1-32", "l@64"])
    assert plan.points == 3 and plan.geomean == pytest.approx((0.5 * 0.8 * 0.9) ** (1 / 3))
    assert plan.missing == []
    narrow = ds.summarise_plan(table, ["s@1"])
    assert narrow.points == 1 and narrow.geomean == pytest.approx(0.5)
    gap = ds.summarise_plan(table, ["s@1-32", "nope@64"])
    assert gap.points == 2 and gap.missing == ["nope at attn_res TP8 nb2 B=64"]
    for bad in ("s", "s@0", "s@8-4", "@1", "s@x"):
        with pytest.raises(ValueError):
            ds.parse_plan(bad)
    with pytest.raises(ValueError, match="covered"):
        ds.summarise_plan(table, ["s@2-4"])


def test_session40_projection_of_the_7x128_plans(ds):
    """The committed records of session 40 give the projection its README cites before the gate ran."""
    recs = [ds.load_record(p) for p in sorted((S40 / "call2").glob("*.json.xz")) + sorted((S40 / "call3").glob("*.json.xz"))]
    base, table = ds.ratios_by_point(recs, None)
    assert base == "ar_base" and len(table) == 8 * 7
    plan = ds.summarise_plan(table, ["ar_c7@1-32", "ar_c7L7@64"])
    assert plan.points == 56 and round(plan.geomean, 3) == 0.941 and plan.high < 1.0


def test_cli_json_and_one_line_errors(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "scripts/diag_summary.py"), *a],
                                    capture_output=True, text=True, timeout=60)
    rec = write(tmp_path / "r.json", record("nb1", {1: {"base": 2.0, "v": 1.0}}))
    ok = run(str(rec), "--plan", "v@1", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["base"] == "base" and out["plan"]["geomean"] == pytest.approx(0.5)
    text = run(str(rec))
    assert text.returncode == 0 and "v " in text.stdout
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    for args in ((str(junk),), (str(rec), "--base", "nobody"), (str(rec), "--plan", "v@0"),
                 (str(tmp_path / "missing.json"),)):
        bad = run(*args)
        assert bad.returncode == 2 and bad.stderr.startswith("diag_summary: ") and "Traceback" not in bad.stderr, args
