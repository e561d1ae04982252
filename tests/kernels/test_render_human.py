"""render_human reuses an existing candidate folder as it is; it warns when an uncommitted folder's
provenance is not the point's (a scratch render of scripts/render_variant.py, which names its base
as parent, rendered to the same id), and stays quiet about committed folders."""
from __future__ import annotations

import shutil
import subprocess

import pytest

import render_human
from harness.toolchain.candidate import Provenance, create_candidate

from kernel_helpers import ROOT


def _point(label: str) -> dict:
    [pt] = [p for p in render_human.human_points() if p["label"] == label]
    return pt


def test_a_reused_scratch_folder_with_another_provenance_is_warned_about(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    pt = _point("12ecfe_tp8_dense_streaming")
    clean = render_human.render_point(pt)
    assert clean.path == tmp_path / "kernels_generated" / "gemm_situ_and_mul" / clean.id
    assert clean.provenance.parent is None
    assert render_human.render_point(pt).id == clean.id          # reused, the point's own provenance
    assert capsys.readouterr().err == ""

    shutil.rmtree(clean.path)                                    # what render_variant.py writes instead
    create_candidate("gemm_situ_and_mul", clean.source, clean.scope,
                     Provenance(author="human", parent="78adedfa9fd2", template=clean.provenance.template))
    reused = render_human.render_point(pt)
    assert reused.id == clean.id and reused.provenance.parent == "78adedfa9fd2"
    err = capsys.readouterr().err
    assert "12ecfe_tp8_dense_streaming" in err and str(reused.path) in err
    assert "parent '78adedfa9fd2', not None" in err and "delete the folder" in err


def test_a_committed_folder_keeps_its_provenance_without_a_warning(capsys):
    """7b9dd5 was committed with its base (268009) as parent; rendering its point reuses it quietly."""
    folder = ROOT / "kernels_generated" / "skinny_gemm" / "7b9dd56712f3"
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse"],
                                                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    assert render_human.committed(folder)
    cand = render_human.render_point(_point("nocl_w8_u6_xpre_nol1pf128_alt_mla_w16_nocl_u6"))
    assert cand.path == folder and cand.provenance.parent == "268009f21621"
    assert capsys.readouterr().err == ""


def test_provenance_mismatch_names_each_differing_key_and_ignores_the_time_stamp():
    a = Provenance(author="human", parent=None, created_utc="2026-12-06T07:00:00+00:00",
                   template={"family": "f", "params": {"x": 1}})
    same_but_later = Provenance(author="human", parent=None, created_utc="2026-12-06T08:00:00+00:00",
                                template={"family": "f", "params": {"x": 1}})
    assert render_human.provenance_mismatch(same_but_later, a) is None
    other = Provenance(author="template", parent="abc", template={"family": "f", "params": {"x": 2}})
    why = render_human.provenance_mismatch(other, a)
    assert why.startswith("author 'template', not 'human'; parent 'abc', not None; template ")
