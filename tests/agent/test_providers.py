"""Both official SDKs against a local scripted server: replies, 429 with retry-after, 500,
a stalled response (request timeout), budgets; keys never leak into what we record."""
from __future__ import annotations

import time

import pytest

from harness.agent.budget import Budget, StopReason
from harness.agent.providers import (AnthropicProvider, Message, OpenAIProvider, ProviderError, RetryPolicy,
                                     make_provider)
from harness.errors import NotRunnable

from .conftest import FAKE_ANTHROPIC_KEY, FAKE_OPENAI_KEY
from .llm_server import ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.05, max_delay_s=2.0, request_timeout_s=1.5)


def _provider(kind: str, url: str, budget: Budget | None = None, policy: RetryPolicy = FAST, notes=None):
    budget = budget or Budget()
    if kind == "openai":
        return OpenAIProvider("gpt-4o", policy, budget, base_url=url + "/v1", on_attempt=notes)
    return AnthropicProvider("claude-sonnet-4-5", policy, budget, base_url=url, on_attempt=notes)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_reply_usage_and_cost(kind, harness_root):
    with ScriptedLLM([("reply", "hello")]) as srv:
        budget = Budget()
        p = _provider(kind, srv.url, budget)
        c = p.complete("sys", [Message("user", "hi")], 256)
    assert c.text == "hello" and c.attempts == 1
    assert (c.input_tokens, c.output_tokens) == (100, 50)
    assert c.cost_usd is not None and c.cost_usd > 0 and budget.tokens == 150
    req = srv.requests[0]
    req["headers"] = {k.lower(): v for k, v in req["headers"].items()}
    if kind == "openai":
        assert req["path"] == "/v1/chat/completions"
        assert req["body"]["messages"][0] == {"role": "system", "content": "sys"}
        assert req["headers"]["authorization"] == f"Bearer {FAKE_OPENAI_KEY}"
    else:
        assert req["path"] == "/v1/messages" and req["body"]["system"] == "sys"
        assert FAKE_ANTHROPIC_KEY in (req["headers"].get("x-api-key", "") + req["headers"].get("authorization", ""))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_429_retry_after_is_honoured(kind, harness_root):
    notes: list[dict] = []
    with ScriptedLLM([("status", 429, {"retry-after": "1"}), ("reply", "ok")]) as srv:
        p = _provider(kind, srv.url, notes=notes.append)
        c = p.complete("s", [Message("user", "u")])
    assert c.text == "ok" and c.attempts == 2
    gap = srv.requests[1]["t"] - srv.requests[0]["t"]
    assert gap >= 0.95                                  # waited the server's 1 s, not the 0.05 s backoff
    assert notes[0]["outcome"] == "error" and notes[0]["retry_after_s"] == 1.0 and "429" in notes[0]["detail"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_500_then_success(kind, harness_root):
    with ScriptedLLM([("status", 500, {}), ("status", 503, {}), ("reply", "fine")]) as srv:
        c = _provider(kind, srv.url).complete("s", [Message("user", "u")])
    assert c.text == "fine" and c.attempts == 3 and len(srv.requests) == 3


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_stalled_response_times_out_then_retries(kind, harness_root):
    with ScriptedLLM([("stall", 30), ("reply", "late but fine")]) as srv:
        t0 = time.monotonic()
        c = _provider(kind, srv.url).complete("s", [Message("user", "u")])
        took = time.monotonic() - t0
    assert c.text == "late but fine" and c.attempts == 2
    assert 1.4 <= took < 10                              # one 1.5 s request timeout, not the 30 s stall


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_gives_up_after_max_attempts_and_does_not_retry_4xx(kind, harness_root):
    with ScriptedLLM([("status", 500, {})] * 10) as srv:
        with pytest.raises(ProviderError) as ei:
            _provider(kind, srv.url).complete("s", [Message("user", "u")])
        assert ei.value.attempts == FAST.max_attempts and len(srv.requests) == FAST.max_attempts
    with ScriptedLLM([("status", 400, {})] * 3) as srv:
        with pytest.raises(ProviderError) as ei:
            _provider(kind, srv.url).complete("s", [Message("user", "u")])
        assert len(srv.requests) == 1 and not ei.value.retryable


def test_budget_stops_requests(harness_root):
    budget = Budget(max_tokens=200)
    with ScriptedLLM(default="x") as srv:
        p = _provider("openai", srv.url, budget)
        p.complete("s", [Message("user", "u")])          # 150 tokens
        p.complete("s", [Message("user", "u")])          # 300: over
        assert budget.exhausted() is StopReason.TOKENS
        with pytest.raises(ProviderError, match="token budget"):
            p.complete("s", [Message("user", "u")])
        assert len(srv.requests) == 2
    assert Budget(time_limit_s=0.0).exhausted() is StopReason.TIME
    b = Budget(max_cost_usd=0.001)
    b.charge(1000, 1000, 0.002)
    assert b.exhausted() is StopReason.COST


def test_missing_key_and_bad_spec(monkeypatch, harness_root):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(NotRunnable, match="ANTHROPIC_API_KEY"):
        make_provider("anthropic:claude-sonnet-4-5", None, FAST, Budget())
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(NotRunnable, match="OPENAI_API_KEY"):
        make_provider("openai:gpt-4o", None, FAST, Budget())
    p = make_provider("openai:qwen", "http://127.0.0.1:9/v1", FAST, Budget())   # local server: no key needed
    assert p.author == "llm:openai-compatible/qwen"
