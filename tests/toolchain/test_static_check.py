import json

import pytest

from harness.toolchain.static_check import check_source, launch_tensor_names

from .conftest import FIXTURES, REPO

STATIC = FIXTURES / "static"
EXPECTED = json.loads((STATIC / "expected_rules.json").read_text())
NAMES = launch_tensor_names("moe_router")


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_each_forbidden_pattern_is_rejected(fixture):
    rep = check_source((STATIC / f"{fixture}.py").read_text(), NAMES)
    assert not rep.ok
    assert EXPECTED[fixture] in {f.rule for f in rep.findings}, rep.summary()


def test_base_of_the_fixtures_passes():
    """Each fixture is the base plus one forbidden line: the base itself must be clean."""
    rep = check_source((STATIC / "ok_base.py").read_text(), NAMES)
    assert rep.ok, rep.summary()


def test_findings_name_the_line():
    rep = check_source((STATIC / "torch_matmul.py").read_text(), NAMES)
    line = next(f.line for f in rep.findings if f.rule == "torch_compute")
    assert "torch.matmul" in (STATIC / "torch_matmul.py").read_text().splitlines()[line - 1]


def test_launch_must_take_the_op_tensors():
    src = (STATIC / "ok_base.py").read_text().replace("def launch(compiled, **tensors):", "def launch(compiled, x):")
    rep = check_source(src, NAMES)
    assert {f.rule for f in rep.findings} == {"bad_signature"}


def test_real_kernels_pass():
    for path in (REPO / "kernels_generated" / "moe_router").glob("*/kernel.py"):
        assert check_source(path.read_text(), NAMES).ok, path
    for name in ("wrong_answer", "illegal_address", "broken"):
        assert check_source((FIXTURES / f"{name}.py").read_text(), NAMES).ok, name
