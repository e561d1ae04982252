"""`harness check / compile / eval` (harness/cli_kernels.py): the bad-input contract (one line
on stderr, exit 2, no traceback), checked before anything compiles."""
from __future__ import annotations

import json

import pytest

import harness.toolchain as toolchain

OP = "moe_router"


def _promoted(op: str) -> str:
    from harness import paths

    return next(e["candidate"] for e in json.loads(paths.promoted_manifest().read_text()) if e["op"] == op)


@pytest.fixture
def no_work(monkeypatch):
    """Nothing compiles or runs: a bad option must be refused before that."""
    def refuse(*a, **k):
        raise AssertionError("compiled or evaluated despite a bad option")
    monkeypatch.setattr(toolchain, "compile_matrix", refuse)
    monkeypatch.setattr(toolchain, "evaluate_candidate", refuse)


@pytest.mark.parametrize("argv", [
    ["compile", OP, "{cid}", "--tp", "7"],
    ["compile", OP, "{cid}", "--tp", "8,12", "--json"],
    ["compile", OP, "{cid}", "--timeout-s", "0"],
    ["compile", OP, "{cid}", "--timeout-s", "-1"],
    ["eval", OP, "{cid}", "--sets", "0"],
    ["eval", OP, "{cid}", "--sets", "-3", "--json"],
    ["eval", OP, "{cid}", "--timeout-s", "0"],
])
def test_bad_numeric_option_is_one_line_exit_2(argv: list[str], run_cli, no_work) -> None:
    code, out, err = run_cli([a.format(cid=_promoted(OP)) for a in argv])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:"), err
    named = "TP " if argv[3] == "--tp" else argv[3]   # the line names what was wrong
    assert named in lines[0], err


@pytest.mark.parametrize("verb", ["check", "compile", "eval"])
def test_an_empty_candidate_id_is_named_as_such(verb: str, run_cli, no_work) -> None:
    code, out, err = run_cli([verb, OP, " "])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "empty candidate id" in lines[0], err
