"""`harness trace` and `harness eval-model` (harness/cli_model.py): the bad-input contract
(one line on stderr, exit 2, no traceback)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def _one_error_line(code: int, out: str, err: str) -> str:
    assert code == 2 and "Traceback" not in out + err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:"), err
    return lines[0]


@pytest.mark.parametrize("doc", [
    {"counters": 5},
    {"counters": [{"op": "moe_router"}]},
    {"counters": ["row"]},
    {"paths": [{}]},
    {"paths": 3},
    {"paths": [{"kernels": "on", "trace": [{"op": "x", "outcome": "kernel"}]}]},
])
@pytest.mark.parametrize("as_json", [False, True])
def test_trace_from_a_malformed_file_is_one_line_exit_2(doc, as_json: bool, tmp_path: Path, run_cli) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    line = _one_error_line(*run_cli(["trace", "--from", str(f)] + (["--json"] if as_json else [])))
    assert str(f) in line


def test_trace_from_a_well_formed_file_still_prints(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "t.json"
    rows = [{"op": "moe_router", "outcome": "fallback", "reason": "no_kernel", "count": 3}]
    f.write_text(json.dumps({"paths": [{"kernels": "on", "trace": rows}]}))
    code, out, _ = run_cli(["trace", "--from", str(f), "--json"])
    assert code == 0 and json.loads(out) == {"kernels on": rows}


@pytest.mark.parametrize("verb", [["trace", "--steps", "1", "--batch", "1"],
                                  ["eval-model", "--steps", "1", "--context", "4", "--structured", "0"]])
@pytest.mark.parametrize("where", ["missing_folder", "a_directory"])
def test_an_unwritable_save_is_one_line_exit_2(verb: list[str], where: str, tmp_path: Path, run_cli,
                                               monkeypatch) -> None:
    import harness.model.evaluate as model_evaluate

    def no_decode(*a, **k):                      # the path is checked before any decode
        raise AssertionError("decoded despite a bad --save")
    monkeypatch.setattr(model_evaluate, "evaluate_model", no_decode)
    save = tmp_path / "no" / "such" / "t.json" if where == "missing_folder" else tmp_path
    if verb[0] == "trace":
        import harness.model as model
        monkeypatch.setattr(model, "K3Decoder", no_decode)
    line = _one_error_line(*run_cli(verb + ["--save", str(save)]))
    assert "--save" in line


def test_eval_model_negative_structured_is_one_line_exit_2(run_cli) -> None:
    line = _one_error_line(*run_cli(["eval-model", "--steps", "1", "--context", "4", "--structured", "-1"]))
    assert "--structured" in line
