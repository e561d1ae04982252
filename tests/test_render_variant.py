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


def test_outside_space_renders_a_point_the_space_does_not_list(rv, tmp_path):
    """Session 40's 14-CTA attn_res cluster: refused by default, rendered with outside_space, and the
    render is the family's template at exactly those params (the space only gates, never rewrites)."""
    base = "6f681825bd0a"                 # attn_res gramhybrid, promoted in session 40
    sets = {"small_cs": 14, "small_threads": 64}
    with pytest.raises(ValueError, match="declared space"):
        rv.render_variant("attn_res", base, sets, root=tmp_path)
    cand = rv.render_variant("attn_res", base, sets, root=tmp_path, outside_space=True)
    src = cand.kernel_path.read_text()
    assert "SMALL_R1 = Plan(cs=14, threads=64, vec=8, rounds=1)" in src
    assert "LARGE = Plan(cs=7, threads=128, vec=8, rounds=2)" in src
    assert "assert self.cs in (1, 2, 4, 7, 8, 14) and" in src      # the plan's own check admits it
    assert cand.provenance.template["params"]["small_cs"] == 14 and cand.provenance.parent == base
    with pytest.raises(ValueError, match="no param"):       # names are still checked
        rv.render_variant("attn_res", base, {"smal_cs": 14}, root=tmp_path, outside_space=True)


def test_cli_outside_space_flag(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "scripts/render_variant.py"), *a],
                                    capture_output=True, text=True, timeout=120)
    ok = run("attn_res", "6f6818", "--set", "small_cs=14", "--set", "small_threads=64", "--outside-space",
             "--out", str(tmp_path), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["params"]["small_cs"] == 14


def test_scope_replaces_keys_of_the_base_scope_within_the_family(rv, tmp_path):
    """--scope: skinny 268009 at two other named shapes is the same kernel under another scope (another
    id); a shape or batch range outside the family's scope, or an unknown key, is refused."""
    base = ROOT / "kernels_generated/skinny_gemm/268009f21621"
    cand = rv.render_variant("skinny_gemm", "268009", {}, root=tmp_path,
                             scope_sets={"shapes": ["mla_g_proj", "kda_o_proj"]})
    assert cand.kernel_path.read_text() == (base / "kernel.py").read_text()
    assert list(cand.scope.shapes) == ["mla_g_proj", "kda_o_proj"] and list(cand.scope.batch) == [1, 8]
    assert cand.id != "268009f21621"
    for bad, match in (({"shapes": ["nope"]}, "does not narrow"), ({"batch": [1, 128]}, "does not narrow"),
                       ({"shapes": []}, "does not narrow"), ({"colour": ["red"]}, "is not in the family's scope"),
                       ({"batch": 8}, "wants a JSON list"), ({"shapes": "mla_g_proj"}, "wants a JSON list")):
        with pytest.raises(ValueError, match=match):
            rv.render_variant("skinny_gemm", "268009", {}, root=tmp_path, scope_sets=bad)
    assert len(list((tmp_path / "skinny_gemm").iterdir())) == 1
