"""eval-model on tiny: no kernels -> 100% agreement and an all-reference trace; a kernel that
changes the math is seen in the numbers and the trace; the CLI verbs."""
from __future__ import annotations

import json

import pytest
import reference_impls
from harness.model.evaluate import KernelsMode, evaluate_model
from harness.registry import KernelScope, Registry


def test_both_without_kernels_agrees_fully():
    res = evaluate_model("tiny", steps=3, context=6, batch=2, kernels="both", structured=1, registry=Registry())
    assert res.greedy_agreement == 1.0 and res.max_logit_err == 0.0 and res.max_kl == 0.0
    assert len(res.per_step) == 3
    assert [p.kernels for p in res.paths] == ["off", "on"]
    for p in res.paths:
        assert p.kernel_calls == 0 and p.trace
        assert all(r["outcome"] == "fallback" for r in p.trace)
        assert {r["reason"] for r in p.trace} == ({"no_kernel"})
        assert p.schema_valid == p.schema_total == 1


def test_a_kernel_that_changes_the_math_is_measured():
    ref = reference_impls.get("situ_and_mul").reference

    def off_by_a_bit(gate_up, out):
        out.copy_(ref(gate_up)["out"] * 1.05)

    reg = Registry(check_shapes=False)
    reg.register("situ_and_mul", KernelScope(archs=("cpu",), tp=(1,), batch=(1, 64)), off_by_a_bit)
    res = evaluate_model("tiny", steps=2, context=4, batch=2, kernels=KernelsMode.BOTH, structured=0, registry=reg)
    on, off = res.path("on"), res.path("off")
    assert on.kernel_calls > 0 and off.kernel_calls == 0
    assert any(r["reason"] == "disabled" for r in off.trace)        # the off path used the kill switch
    assert res.max_logit_err > 0 and res.max_kl > 0


def test_cli_eval_model_json_and_trace_from_file(tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "eval.json"
    main(["eval-model", "--steps", "2", "--context", "4", "--structured", "0", "--json", "--save", str(out)])
    doc = json.loads(capsys.readouterr().out)
    assert doc["greedy_agreement"] == 1.0 and doc["kernels"] == "both"
    main(["trace", "--from", str(out), "--json"])
    tables = json.loads(capsys.readouterr().out)
    assert set(tables) == {"kernels off", "kernels on"}


@pytest.mark.parametrize("argv", [["eval-model", "--kernels", "maybe"], ["eval-model", "--config", "k4"],
                                  ["eval-model", "--steps", "0"], ["trace", "--from", "/nonexistent.json"]])
def test_cli_bad_input_is_one_line_exit_2(argv, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("harness: error:") and "\n" not in err


def test_random_fill_long_context_on_cpu():
    """Decode after a context longer than the tiny prompts: both paths start from the same
    seeded caches, and a kernel-free run agrees exactly."""
    res = evaluate_model("tiny", steps=2, context=512, batch=2, fill="random", structured=0, registry=Registry())
    assert res.greedy_agreement == 1.0 and res.max_logit_err == 0.0
    assert res.context == 512


@pytest.mark.parametrize("kwargs", [{"structured": -1}, {"structured_tokens": 0}])
def test_evaluate_model_refuses_a_negative_structured_count_before_any_decode(kwargs):
    """structured=-1 used to reach max() over an empty list after the whole decode."""
    from harness.errors import UserError

    with pytest.raises(UserError, match="structured"):
        evaluate_model("tiny", steps=1, context=4, batch=1, **kwargs)
