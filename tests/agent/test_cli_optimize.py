"""`harness optimize` as a process: the progress lines a log file gets when stderr is not a
terminal (a run on a lent machine; session 24's device log of a whole run was empty)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import fenced, tiny_kernel
from .llm_server import ScriptedLLM

REPO = Path(__file__).resolve().parents[2]


def test_optimize_writes_timestamped_progress_lines_when_stderr_is_a_file(harness_root):
    r = subprocess.run([sys.executable, "-m", "harness.cli", "optimize", "--op", "moe_router", "--agent",
                        "openai:gpt-4o", "--time-limit", "0", "--json"], capture_output=True, text=True,
                       cwd=REPO, env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    said = [ln.split("] ", 1)[1] for ln in lines]
    assert said[:2] == ["run started", "stopped: time limit reached"] and said[3:] == ["run finished"]
    assert said[2].startswith("gates not run: no candidate")
    assert all(ln.startswith("[") and " s] " in ln for ln in lines)
    summary = json.loads(r.stdout)                       # stdout stays pure JSON
    assert summary["stopped"] == "time limit reached" and summary["candidates"] == 0


@pytest.mark.parametrize("extra", [["--budget-usd", "-1"], ["--max-tokens", "-5"], ["--time-limit", "-5"],
                                   ["--request-timeout", "0"],
                                   ["--agent", "openai:gpt-4o", "--base-url", "not a url"],
                                   ["--agent", "openai:gpt-4o", "--base-url", "localhost:8000/v1"]])
def test_a_bad_limit_or_base_url_is_one_line_exit_2_and_starts_no_run(extra, harness_root, run_cli):
    code, out, err = run_cli(["optimize", "--op", "moe_router", *extra])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and extra[-2] in lines[0], err
    assert not (harness_root / "runs").exists() or not any((harness_root / "runs").iterdir())


@pytest.mark.parametrize("agent,code_wanted", [("openai:gpt-4o", 3), ("bogus:model", 2)])
def test_a_run_refused_at_its_start_leaves_no_run_folder(agent, code_wanted, harness_root, run_cli, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--agent", agent])
    assert code == code_wanted and "Traceback" not in out + err
    assert [ln for ln in err.splitlines() if ln.strip()][0].startswith("harness: error:"), err
    runs = harness_root / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_resume_refuses_a_setting_the_run_would_ignore(harness_root, run_cli, monkeypatch):
    import shutil

    shutil.copytree(REPO / "prompts", harness_root / "prompts")

    def cli(*argv: str) -> tuple[int, str, str]:
        return run_cli(list(argv))

    code, out, err = cli("optimize", "--op", "moe_router", "--time-limit", "0", "--json")
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    events = (harness_root / "runs" / run_id / "events.jsonl").read_bytes()
    for extra in (["--gpu", "b200"], ["--agent", "openai:gpt-4o"], ["--seed", "7"]):
        code, out, err = cli("optimize", "--op", "moe_router", "--resume", run_id, *extra)
        assert code == 2 and "Traceback" not in out + err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"harness: error: {extra[0]} {extra[1]}: run {run_id} keeps"), err
    assert (harness_root / "runs" / run_id / "events.jsonl").read_bytes() == events      # nothing resumed
    code, _, err = cli("optimize", "--op", "moe_router", "--resume", run_id, "--gpu", "h200", "--time-limit", "0")
    assert code == 0, err                                # the run's own value is no conflict


def test_a_refused_promote_without_a_gpu_exits_3_and_says_why(harness_root, run_cli, monkeypatch):
    """`--promote` that promotes nothing exited 0. Without a GPU no draft can be verified, so
    the gates that decide a promotion never run: exit 3 ("needs a GPU"), the reason on one
    stderr line, and --json still prints the whole summary. The same run without --promote
    (the Quick start's `harness optimize --op moe_router`) still exits 0."""
    shutil.copytree(REPO / "prompts", harness_root / "prompts")
    monkeypatch.setattr("harness.agent.stages.gpu_available", lambda: False)
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--promote", "--time-limit", "0", "--json"])
    assert code == 3 and "Traceback" not in out + err
    s = json.loads(out)
    assert s["promoted"]["ok"] is False and s["promoted"]["reason"].startswith("gates not run: no candidate was verified on a GPU")
    assert err.splitlines()[-1] == f"harness: error: --promote refused: {s['promoted']['reason']}"
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--promote", "--time-limit", "0"])
    assert code == 3 and "promotion: refused: gates not run" in " ".join(out.split())
    assert err.splitlines()[-1].startswith("harness: error: --promote refused: gates not run: ")
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--time-limit", "0", "--json"])
    assert code == 0 and json.loads(out)["promoted"] is None, err


def test_every_llm_request_failing_exits_1_and_says_why(harness_root, run_cli):
    """A run whose every LLM request failed (here: the key refused, HTTP 401) drafted no kernel
    and exited 0. It exits 1 with the first slot's failure; --json still prints the summary."""
    with ScriptedLLM([("status", 401, {})] * 2) as srv:
        code, out, err = run_cli(["optimize", "--op", "moe_router", "--agent", "openai:gpt-4o", "--base-url",
                                  srv.url + "/v1", "--rounds", "1", "--candidates-per-round", "2", "--json"])
    assert len(srv.requests) == 2
    assert code == 1 and "Traceback" not in out + err
    s = json.loads(out)
    assert s["candidates"] == 0 and s["slots_failed"] == 2 and s["llm_calls"] == 2
    last = err.splitlines()[-1]
    assert last.startswith("harness: error: no kernel drafted: all 2 drafting slot(s) failed (first: provider: HTTP 401"), last


def test_a_run_with_one_kernel_among_failed_requests_exits_0(harness_root, run_cli):
    """Only a run that drafted no kernel at all is a failure: one slot's reply is a kernel."""
    with ScriptedLLM([("reply", fenced(tiny_kernel())), ("status", 401, {})]) as srv:
        code, out, err = run_cli(["optimize", "--op", "moe_router", "--agent", "openai:gpt-4o", "--base-url",
                                  srv.url + "/v1", "--rounds", "1", "--candidates-per-round", "2", "--json"])
    s = json.loads(out)
    assert code == 0 and s["candidates"] == 1 and s["slots_failed"] == 1, err


def test_promote_on_resuming_a_finished_run_exits_1_and_says_nothing_was_gated(harness_root, run_cli):
    """A finished run resumed with --promote does no more work, so nothing is gated or promoted:
    exit 1 with that reason, not 0."""
    shutil.copytree(REPO / "prompts", harness_root / "prompts")
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--time-limit", "0", "--json"])
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    code, out, err = run_cli(["optimize", "--op", "moe_router", "--resume", run_id, "--promote", "--json"])
    assert code == 1 and json.loads(out)["promoted"] is None
    assert err.splitlines()[-1] == (f"harness: error: --promote: run {run_id} had already finished; "
                                    "nothing was gated or promoted")
