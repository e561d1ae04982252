"""scripts/render_variant.py: a committed templated candidate with some params changed, rendered as
a scratch candidate for a GPU bench."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = "8d966129dc0a"                     # kda persistmix, promoted


@pytest.fixture(scope="module")
def rv():
    spec = importlib.util.spec_from_file_location("render_variant", ROOT / "scripts/render_variant.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parse_sets_reads_json_else_strings(rv):
    assert rv.parse_sets(["a=2", "b=true", "c=x", 'd="y"']) == {"a": 2, "b": True, "c": "x", "d": "y"}
    with pytest.raises(ValueError):
        rv.parse_sets(["nokey"])


def test_a_variant_is_the_family_render_of_the_changed_params(rv, tmp_path):
    """mid_v_split 2 on 8d9661 is session 19's committed d5a02a, byte for byte; the base is untouched."""
    cand = rv.render_variant("kda_decode", BASE[:6], {"mid_v_split": 2}, root=tmp_path)
    committed = ROOT / "kernels_generated/kda_decode/d5a02a202445/kernel.py"
    assert cand.id == "d5a02a202445" and cand.path.parent == tmp_path / "kda_decode"
    assert cand.kernel_path.read_text() == committed.read_text()
    assert cand.provenance.author == "human" and cand.provenance.parent == BASE
    assert cand.provenance.template["params"]["mid_v_split"] == 2
    again = rv.render_variant("kda_decode", BASE, {"mid_v_split": 2}, root=tmp_path)
    assert again.id == cand.id and len(list((tmp_path / "kda_decode").iterdir())) == 1


def test_points_outside_the_space_and_unknown_params_are_refused(rv, tmp_path):
    with pytest.raises(ValueError, match="declared space"):
        rv.render_variant("kda_decode", BASE, {"mid_v_split": 3}, root=tmp_path)
    with pytest.raises(ValueError, match="no param"):
        rv.render_variant("kda_decode", BASE, {"nope": 1}, root=tmp_path)
    with pytest.raises(ValueError, match="names 0 candidates"):
        rv.render_variant("kda_decode", "zzzz", {}, root=tmp_path)
    assert not (tmp_path / "kda_decode").exists()


def test_cli_prints_the_id_or_a_clean_error(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "scripts/render_variant.py"), *a],
                                    capture_output=True, text=True, timeout=120)
    ok = run("kda_decode", BASE, "--set", "mid_v_split=2", "--out", str(tmp_path), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["id"] == "d5a02a202445"
    bad = run("kda_decode", BASE, "--set", "mid_v_split=3", "--out", str(tmp_path))
    assert bad.returncode == 2 and bad.stderr.startswith("render_variant: ") and "Traceback" not in bad.stderr
