"""The scope gate's dispatch cases on the CPU (a stand-in writes the reference's outputs):
every case chooses what the declared scope says, and a narrow-shape scope is checked to leave
the op's other named shapes to the reference."""
from __future__ import annotations

import reference_impls
from gates.scope import _reference_standin, decide, dispatch_cases
from harness.toolchain.candidate import Scope

OP = "skinny_gemm"


def _cases(scope: Scope) -> list[dict]:
    defn = reference_impls.get(OP)
    return dispatch_cases(defn, scope, "cpu", "cpu", _reference_standin(defn))


def test_a_narrow_shape_scope_gets_an_undeclared_shape_case_that_falls_back():
    scope = Scope.from_json({"archs": ["sm_90a"], "tp": [8], "batch": [2, 4], "shapes": ["mla_qkv_a"]})
    cases = _cases(scope)
    shape_cases = [c for c in cases if c["case"].startswith("undeclared shape")]
    assert len(shape_cases) == 1 and "mla_qkv_a" not in shape_cases[0]["case"]
    assert (shape_cases[0]["got_outcome"], shape_cases[0]["got_reason"]) == ("fallback", "shape")
    assert {c["case"].split(" B=")[0] for c in cases} >= {"inside", "below", "above", "undeclared TP16", "kill switch"}
    numbers = {"compiles": [{"arch": "sm_90a", "tp": 8, "verdict": "OK"}], "dispatch": cases}
    verdict, reasons = decide(numbers, ["sm_90a"], [8])
    assert reasons == [] and verdict.value == "pass"


def test_every_shape_in_scope_means_no_undeclared_shape_case():
    every = list(reference_impls.get(OP).extra["shape_names"])
    scope = Scope.from_json({"archs": ["sm_90a"], "tp": [8], "batch": [1, 1], "shapes": every})
    assert not any(c["case"].startswith("undeclared shape") for c in _cases(scope))
