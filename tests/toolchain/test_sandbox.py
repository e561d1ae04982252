"""Candidates that crash, exit, hang, flood the logs or fork hanging children are each
classified within their deadline, leave no process behind and cannot forge a result. The
fault happens at import or in compile(), before any GPU work, so this runs on the CPU."""
import os
import tempfile
import time

import pytest

from harness.toolchain import Verdict, compile_candidate
from harness.toolchain.sandbox import group_alive, run_job, scrubbed_env

from .conftest import FIXTURES

DEADLINE_S = 60.0


def _compile_job(name: str) -> dict:
    return {"kind": "compile", "kernel_path": str(FIXTURES / f"{name}.py"), "arch": "sm_90a", "tp": 8,
            "static": {}, "options": "--enable-tvm-ffi", "dump_dir": tempfile.mkdtemp()}


@pytest.mark.parametrize("name, verdict, deadline_s", [
    ("segfault", Verdict.CRASH, DEADLINE_S),
    ("os_exit", Verdict.CRASH, DEADLINE_S),
    ("sleep_forever", Verdict.TIMEOUT, 8.0),
    ("print_10mb", Verdict.CRASH, DEADLINE_S),
    ("fork_hang", Verdict.COMPILE_ERROR, DEADLINE_S),
])
def test_fault_is_classified_within_deadline_without_orphans(name, verdict, deadline_s):
    t0 = time.monotonic()
    res = run_job(_compile_job(name), deadline_s)
    assert time.monotonic() - t0 < deadline_s + 5
    assert res.verdict is verdict, (res.message, res.stderr[-2000:])
    assert not group_alive(res.pgid), "a process of the candidate's group survived"
    if name == "segfault":
        assert res.signal_name == "SIGSEGV"
    if name == "print_10mb":
        assert res.stdout_bytes >= 10 * 2**20 and len(res.stdout) < 80 * 1024   # drained, kept capped
        assert "forged" in res.message and res.result is None


def test_fault_through_compile_candidate_is_not_cached(make_fixture, cache_root):
    cand = make_fixture("os_exit")
    rep = compile_candidate(cand, "sm_90a", 8, timeout_s=DEADLINE_S, cache_root=cache_root)
    assert rep.verdict is Verdict.CRASH
    assert not compile_candidate(cand, "sm_90a", 8, timeout_s=DEADLINE_S, cache_root=cache_root).cache_hit


def test_secrets_are_removed_from_the_child_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    monkeypatch.setenv("MY_SECRET_THING", "s")
    monkeypatch.setenv("HARMLESS_SETTING", "1")
    env = scrubbed_env()
    assert "HARMLESS_SETTING" in env
    assert not {"OPENAI_API_KEY", "GITHUB_TOKEN", "MY_SECRET_THING"} & set(env)


def test_canary_reports_not_run_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    res = run_job({"kind": "canary"}, 60)
    assert res.verdict is Verdict.NOT_RUN
    assert os.getpgid(0) != res.pgid
