"""Section 6: the LLM provider and the agent loop against a hostile local server.

Provider level (harness.agent.providers.OpenAIProvider, the real SDK over HTTP): each
scenario checks the request count (bounded retries), the wall time against the bound the
retry policy implies (deadlines kept) and the outcome (a reply or a ProviderError, never a
hang or a stray exception). Loop level: `harness optimize`'s loop (harness.agent.loop) with
the LLM agent against a 429 storm must stop cleanly with its run folder intact and
resumable; the same run resumed against a healthy server must finish."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .llm_server import FaultyLLM

TIMEOUT_S = 1.0
ATTEMPTS = 3
BASE_DELAY_S = 0.05

# name -> (script, expect "reply" | "error", expected requests, expected reply length or None)
SCENARIOS: dict[str, tuple[list[str], str, int, int | None]] = {
    "429_storm": (["status:429"], "error", ATTEMPTS, None),
    "5xx_storm": (["status:500", "status:502", "status:503"], "error", ATTEMPTS, None),
    "429_then_reply": (["status:429", "status:429", "reply:ok"], "reply", 3, 2),
    "stall_then_reply": (["stall:30", "reply:late"], "reply", 2, 4),
    "stall_storm": (["stall:30"], "error", ATTEMPTS, None),
    "slow_drip_body": (["slow_drip:8", "reply:ok"], "reply", 2, 2),
    "truncated_then_reply": (["truncated", "reply:ok"], "reply", 2, 2),
    "garbled_then_reply": (["garbled", "reply:ok"], "reply", 2, 2),
    "garbled_storm": (["garbled"], "error", ATTEMPTS, None),
    "2mb_reply": ([f"big:{2 << 20}"], "reply", 1, 2 << 20),
    "400_not_retried": (["status:400"], "error", 1, None),
}


def _provider(url: str):
    from ..agent.budget import Budget
    from ..agent.providers import OpenAIProvider, RetryPolicy

    policy = RetryPolicy(max_attempts=ATTEMPTS, base_delay_s=BASE_DELAY_S, max_delay_s=1.0, request_timeout_s=TIMEOUT_S)
    return OpenAIProvider("selftest-model", policy, Budget(), base_url=url)


def deadline_s(n_requests: int) -> float:
    """What the policy allows: a timeout per request, the backoff between them, and slack
    for HTTP setup on a loaded machine."""
    backoff = sum(min(1.0, BASE_DELAY_S * 2 ** i) for i in range(n_requests))
    return n_requests * TIMEOUT_S + backoff + 3.0


def run_provider_scenarios() -> list[dict[str, Any]]:
    from ..agent.providers import Message, ProviderError

    rows = []
    for name, (script, expect, n_req, n_len) in SCENARIOS.items():
        with FaultyLLM(script) as srv:
            p = _provider(srv.url)
            t0 = time.monotonic()
            outcome, length, err = "reply", None, ""
            try:
                c = p.complete("s", [Message("user", "u")], 64)
                length = len(c.text)
            except ProviderError as exc:
                outcome, err = "error", str(exc)[:120]
            except Exception as exc:  # noqa: BLE001 - anything else is a finding
                outcome, err = f"raised {type(exc).__name__}", str(exc)[:120]
            took = time.monotonic() - t0
            n = len(srv.requests)
        bound = deadline_s(n_req)
        ok = outcome == expect and n == n_req and took <= bound and (n_len is None or length == n_len)
        rows.append({"name": name, "outcome": outcome, "requests": n, "expected_requests": n_req,
                     "wall_s": round(took, 2), "bound_s": round(bound, 2), "ok": ok, "detail": err})
    return rows


def run_loop_storm(root: Path, canary: str) -> dict[str, Any]:
    """The optimize loop (LLM agent) against a 429 storm, then resumed against a server that
    replies with a kernel. Returns counts; the caller scans root for the canary key (the SDK's
    HTTP debug log included: runs/sdk_http_debug.log)."""
    import contextlib

    env_before = dict(os.environ)
    os.environ.update({"HARNESS_ROOT": str(root), "OPENAI_API_KEY": canary, "OPENAI_LOG": "debug"})
    out: dict[str, Any] = {}
    # The SDK's debug handler writes to the stderr of the moment it is attached: a file under
    # runs/ here, so the HTTP log is part of the tree scanned for the key and the report's
    # terminal is not buried in it.
    (root / "runs").mkdir(parents=True, exist_ok=True)
    debug_log = root / "runs" / "sdk_http_debug.log"
    with open(debug_log, "w", encoding="utf-8") as sink, contextlib.redirect_stderr(sink):
        _sdk_debug_logging_to(sink)
        _run_storm_and_resume(root, out, env_before)
    out["sdk_debug_lines"] = len(debug_log.read_text(encoding="utf-8", errors="replace").splitlines())
    return out


def _run_storm_and_resume(root: Path, out: dict[str, Any], env_before: dict[str, str]) -> None:
    from ..agent.loop import OptimizeConfig, resume, start
    from ..agent.stages import ToolchainStages

    try:
        with FaultyLLM(["status:429"]) as srv:
            cfg = OptimizeConfig(op="silu_and_mul", agent="openai:selftest-model", base_url=srv.url, rounds=1,
                                 candidates_per_round=1, max_attempts=ATTEMPTS, retry_base_delay_s=BASE_DELAY_S,
                                 request_timeout_s=TIMEOUT_S, max_reply_attempts=2, archs=["sm_90a"],
                                 run_gates=False)
            t0 = time.monotonic()
            opt = start(cfg, "storm", stages=ToolchainStages(use_gpu=False))
            try:
                st = opt.run()
                out["storm_outcome"] = "finished" if st.finished else "stopped"
            except Exception as exc:  # noqa: BLE001 - a stray exception is the finding
                out["storm_outcome"] = f"raised {type(exc).__name__}: {exc}"[:200]
            out["storm_wall_s"] = round(time.monotonic() - t0, 2)
            out["storm_requests"] = len(srv.requests)
        folder = root / "runs" / "storm"
        out["storm_events_parse"] = all(json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines())
        out["storm_summary_parses"] = bool(json.loads((folder / "summary.json").read_text()))
        src = (Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "cheats" / "honest.py").read_text()
        with FaultyLLM([f"reply:Here it is.\n\n```python\n{src}```\n"]) as srv:
            opt = resume("storm", {"base_url": srv.url, "rounds": 2}, stages=ToolchainStages(use_gpu=False))
            st = opt.run()
            out["resumed_finished"] = bool(st.finished)
            out["resumed_candidates"] = len(st.records)
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        _quiet_sdk_loggers()


def _sdk_debug_logging_to(stream) -> None:
    """What OPENAI_LOG=debug does at SDK import (debug level and a handler on the SDK and HTTP
    loggers), done here so it holds even when the SDK was imported before the probe."""
    import logging

    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("[%(asctime)s - %(name)s:%(lineno)d - %(levelname)s] %(message)s"))
    for name in ("openai", "httpx"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)


def _quiet_sdk_loggers() -> None:
    """OPENAI_LOG=debug makes the SDK attach a debug handler to its loggers for the rest of
    the process; the probe is over, so the report that follows is not buried in HTTP logs."""
    import logging

    for name in ("openai", "httpx", "httpcore", "anthropic"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
