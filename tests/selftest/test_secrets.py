"""A candidate reading every /proc/*/environ (its parent's included) must not get the
canary key into compile reports, the compile cache or the project tree."""
from __future__ import annotations

from harness.selftest.secrets_leak import canary_key, count_in_tree, run_dumpers_with_key_in_initial_env


def test_env_dumper_leaks_nothing(tmp_path):
    key = canary_key()
    d = run_dumpers_with_key_in_initial_env(tmp_path / "root", tmp_path / "cache", key)
    assert d["verdicts"] == ["COMPILE_ERROR", "CRASH"]
    assert d["helper_output_leaks"] == 0
    assert count_in_tree(tmp_path, key)[0] == 0 and d["report_leaks"] == 0


def test_loop_with_sdk_http_debug_logging_leaks_nothing(tmp_path, capfd):
    """OPENAI_LOG=debug: the SDK's HTTP log lands in runs/sdk_http_debug.log (scanned with the
    rest of the tree), not on the terminal, and holds no key."""
    from harness.selftest.llm_faults import run_loop_storm

    key = canary_key()
    out = run_loop_storm(tmp_path, key)
    log = tmp_path / "runs" / "sdk_http_debug.log"
    assert out["sdk_debug_lines"] >= 1 and "HTTP Re" in log.read_text()
    assert out["resumed_finished"]
    assert count_in_tree(tmp_path, key)[0] == 0
    assert "HTTP Re" not in capfd.readouterr().err
