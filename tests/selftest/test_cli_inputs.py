"""Bad input to the real `harness` CLI (subprocesses): one line, non-zero exit, nothing written."""
from __future__ import annotations

import pytest

from harness.selftest.cli_inputs import cases, run_cli_inputs, verbs


def test_every_verb_gets_a_case(tmp_path):
    vs = verbs()
    assert "optimize" in vs and "selftest" in vs
    labels = {c[0].split(":")[0] for c in cases(tmp_path, all_cases=False)}
    assert set(vs) <= labels


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return run_cli_inputs(tmp_path_factory.mktemp("cli"), all_cases=False)


def test_bad_inputs_fail_cleanly(rows):
    bad = [r for r in rows if not r["ok"] and not r["case"].endswith("unknown option")]
    assert not bad, bad
    assert all(r["exit"] not in (0, None) for r in rows)
    assert rows[0]["files_left"] == []


def test_unknown_option_is_one_line(rows):
    bad = [r for r in rows if r["case"].endswith("unknown option") and not r["one_line"]]
    assert not bad, bad
