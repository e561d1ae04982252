"""`harness narrow` (harness/narrowing.py): a candidate's kernel copied under a narrower scope,
as a new candidate whose parent is the original; anything but a real narrowing is refused."""
from __future__ import annotations

import json
import shutil

import pytest

from harness import paths
from harness.errors import UserError
from harness.narrowing import narrow_candidate, narrowed_scope
from harness.toolchain.candidate import Scope, load_candidate

OP = "skinny_gemm"
BASE = "7b9dd56712f3"          # a committed human candidate over latent_down, latent_up, mla_qkv_a


@pytest.fixture
def root(tmp_path, monkeypatch):
    src = paths.kernels_dir() / OP / BASE
    shutil.copytree(src, tmp_path / "kernels_generated" / OP / BASE, ignore=shutil.ignore_patterns("evidence"))
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    return tmp_path


def test_narrow_copies_the_kernel_under_the_smaller_scope(root, run_cli):
    code, out, err = run_cli(["narrow", OP, BASE[:6], "--shapes", "mla_qkv_a", "--batch", "1-4", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    cand = load_candidate(OP, doc["id"])
    base = load_candidate(OP, BASE)
    assert cand.source == base.source and cand.id != base.id and doc["parent"] == BASE
    assert cand.scope.shapes == ("mla_qkv_a",) and cand.scope.batch == (1, 4) and cand.scope.tp == base.scope.tp
    assert cand.provenance.parent == BASE and cand.provenance.author == base.provenance.author
    assert cand.provenance.template == base.provenance.template
    again = narrow_candidate(OP, BASE, {"shapes": ["mla_qkv_a"], "batch": [1, 4]})
    assert again.id == cand.id                                             # idempotent


@pytest.mark.parametrize("argv, needle", [
    (["--shapes", "nb4"], "not inside"),
    (["--batch", "1-16"], "not inside"),
    (["--tp", "4"], "tp"),
    (["--batch", "1-8"], "nothing to narrow"),
    (["--batch", "eight"], "LO-HI"),
    ([], "name what to narrow"),
])
def test_narrow_refuses_what_is_no_narrowing(root, run_cli, argv, needle):
    code, out, err = run_cli(["narrow", OP, BASE, *argv])
    assert code == 2 and needle in err and "Traceback" not in out + err
    assert [p.name for p in (root / "kernels_generated" / OP).iterdir()] == [BASE]


def test_a_scope_without_shapes_cannot_be_narrowed_to_one():
    scope = Scope.from_json({"archs": ["sm_90a"], "tp": [8], "batch": [1, 64]})
    with pytest.raises(UserError, match="names no shapes"):
        narrowed_scope(scope, {"shapes": ["nb4"]})
    with pytest.raises(UserError, match="state dtype bf16"):
        narrowed_scope(scope, {"state_dtypes": ["bf16"]}, ("fp32",))
    assert narrowed_scope(scope, {"state_dtypes": ["fp32"]}, ("fp32", "bf16")).state_dtypes == ("fp32",)
    with pytest.raises(UserError, match="no scope key"):
        narrowed_scope(scope, {"context": [1]})
