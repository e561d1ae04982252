"""Bad input to the real `harness` CLI (subprocesses): one line, non-zero exit, nothing written."""
from __future__ import annotations

from harness.selftest.cli_inputs import cases, run_cli_inputs, verbs


def test_every_verb_gets_a_case(tmp_path):
    vs = verbs()
    assert "optimize" in vs and "selftest" in vs
    labels = {c[0].split(":")[0] for c in cases(tmp_path, all_cases=False)}
    assert set(vs) <= labels


def test_bad_inputs_fail_cleanly(tmp_path):
    rows = run_cli_inputs(tmp_path, all_cases=False)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
    assert rows[0]["files_left"] == []
