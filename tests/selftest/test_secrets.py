"""A candidate reading every /proc/*/environ (its parent's included) must not get the
canary key into compile reports, the compile cache or the project tree."""
from __future__ import annotations

import pytest

from harness.selftest.secrets_leak import canary_key, count_in_tree, run_dumpers_with_key_in_initial_env


def test_env_dumper_leaks_nothing(tmp_path):
    key = canary_key()
    d = run_dumpers_with_key_in_initial_env(tmp_path / "root", tmp_path / "cache", key)
    assert d["verdicts"] == ["COMPILE_ERROR", "CRASH"]
    assert d["helper_output_leaks"] == 0
    assert count_in_tree(tmp_path, key)[0] == 0 and d["report_leaks"] == 0
