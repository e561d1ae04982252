"""LLM providers behind one small interface, with retries, timeouts and the budget.

OpenAI and Anthropic through their official SDKs; any OpenAI-compatible server (vLLM,
Ollama) through `base_url`. The SDKs' own retries are off (max_retries=0): this module
retries 429/5xx/timeouts itself, honouring `retry-after`, so the budget and the deadline
see every attempt. Keys come from the environment only and are never returned or logged.
"""
from __future__ import annotations

import email.utils
import concurrent.futures
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import NotRunnable, UserError
from .budget import Budget, cost_usd
from .secrets import scrub


@dataclass(frozen=True)
class Message:
    role: str            # "user" | "assistant"
    content: str


@dataclass
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    attempts: int
    latency_s: float


class ProviderError(Exception):
    """A request that failed for good (after retries) or must not be retried."""

    def __init__(self, message: str, retryable: bool = False, attempts: int = 1):
        super().__init__(scrub(message))
        self.retryable = retryable
        self.attempts = attempts


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    request_timeout_s: float = 300.0


def retry_after_s(headers) -> float | None:
    """Seconds the server asks us to wait: retry-after-ms, retry-after (seconds or HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return float(ra)
    except ValueError:
        when = email.utils.parsedate_to_datetime(ra)
        return max(0.0, when.timestamp() - time.time()) if when else None


class DeadlineExceeded(Exception):
    """A request ran past its whole-request deadline (retryable)."""


class Provider:
    """Base: `complete` runs `_request` under the retry policy and charges the budget."""

    label = "base"
    _sdk: Any                             # the SDK module (openai, anthropic): its exception classes
    _client: Any                          # the SDK client requests go through

    def __init__(self, model: str, policy: RetryPolicy, budget: Budget,
                 on_attempt: Callable[[dict], None] | None = None):
        self.model = model
        self.policy = policy
        self.budget = budget
        self.on_attempt = on_attempt      # called with a record of each attempt (for the log)

    @property
    def author(self) -> str:
        return f"llm:{self.label}/{self.model}"

    def _request(self, system: str, messages: list[Message], max_tokens: int) -> tuple[str, int, int]:
        raise NotImplementedError

    def _classify(self, exc: Exception) -> tuple[bool, float | None, str]:
        """(retryable, retry-after seconds, short description) of an SDK exception. The
        OpenAI and Anthropic SDKs share one exception hierarchy; `self._sdk` is the module."""
        sdk = self._sdk
        if isinstance(exc, sdk.APITimeoutError):
            return True, None, f"request timed out after {self.policy.request_timeout_s:g} s"
        if isinstance(exc, sdk.APIStatusError):
            return _status_classify(exc.status_code, exc.response.headers, _short(exc))
        if isinstance(exc, sdk.APIConnectionError):
            return True, None, f"connection error: {_short(exc)}"
        if isinstance(exc, (sdk.APIResponseValidationError, ValueError, KeyError, AttributeError, IndexError, TypeError)):
            return True, None, f"unreadable response: {_short(exc)}"
        raise exc

    def complete(self, system: str, messages: list[Message], max_tokens: int = 8192) -> Completion:
        t0 = time.monotonic()
        last = "no attempt"
        for attempt in range(1, self.policy.max_attempts + 1):
            if (why := self.budget.exhausted()) is not None:
                raise ProviderError(f"not sent: {why.value}", attempts=attempt - 1)
            try:
                text, n_in, n_out = self._request_within_deadline(system, messages, max_tokens)
            except Exception as exc:  # SDK errors are classified below; anything else is a bug
                if isinstance(exc, DeadlineExceeded):
                    retryable, wait_s, last = True, None, str(exc)
                else:
                    retryable, wait_s, last = self._classify(exc)
                self._note(attempt, "error", last, wait_s)
                if not retryable or attempt == self.policy.max_attempts:
                    raise ProviderError(last, retryable, attempt) from None
                backoff = min(self.policy.max_delay_s, self.policy.base_delay_s * 2 ** (attempt - 1))
                delay = max(wait_s or 0.0, backoff * (0.5 + random.random() / 2))
                rem = self.budget.remaining_s()
                if rem is not None and delay >= rem:
                    raise ProviderError(f"{last}; retry would pass the time limit", True, attempt) from None
                time.sleep(delay)
                continue
            usd = cost_usd(self.model, n_in, n_out)
            self.budget.charge(n_in, n_out, usd)
            self._note(attempt, "ok", "", None, n_in, n_out, usd)
            return Completion(text, n_in, n_out, usd, attempt, time.monotonic() - t0)
        raise ProviderError(last, True, self.policy.max_attempts)

    def _request_within_deadline(self, system: str, messages: list[Message], max_tokens: int) -> tuple[str, int, int]:
        """`_request` under a whole-request deadline. The SDKs' timeouts bound each socket
        read, so a server dripping a byte at a time could hold a request for ever; here the
        request runs on a helper thread and is abandoned (its client closed) at the deadline."""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-request")
        fut = pool.submit(self._request, system, messages, max_tokens)
        try:
            return fut.result(timeout=self.policy.request_timeout_s)
        except concurrent.futures.TimeoutError:
            self._abandon()
            raise DeadlineExceeded(f"request exceeded its {self.policy.request_timeout_s:g} s deadline") from None
        finally:
            pool.shutdown(wait=False)

    def _abandon(self) -> None:
        """Close the client so the abandoned request's socket is dropped; a new one is made."""
        try:
            self._client.close()
        except Exception:  # closing a client mid-read may raise in the SDK; nothing to keep
            pass
        self._client = self._new_client()

    def _new_client(self):
        raise NotImplementedError

    def _note(self, attempt: int, outcome: str, detail: str, wait_s: float | None,
              n_in: int = 0, n_out: int = 0, usd: float | None = None) -> None:
        if self.on_attempt is not None:
            self.on_attempt({"provider": self.label, "model": self.model, "attempt": attempt,
                             "outcome": outcome, "detail": scrub(detail)[:500], "retry_after_s": wait_s,
                             "input_tokens": n_in, "output_tokens": n_out, "cost_usd": usd})


def _status_classify(status: int | None, headers, what: str) -> tuple[bool, float | None, str]:
    if status is None:
        return True, None, what
    retryable = status in (408, 409, 429) or status >= 500
    return retryable, retry_after_s(headers) if retryable else None, f"HTTP {status}: {what}"


class OpenAIProvider(Provider):
    label = "openai"

    def __init__(self, model: str, policy: RetryPolicy, budget: Budget, base_url: str | None = None, **kw):
        super().__init__(model, policy, budget, **kw)
        import openai

        key = os.environ.get("OPENAI_API_KEY") or os.environ.get("HARNESS_LLM_API_KEY")
        if not key:
            if base_url is None:
                raise NotRunnable("--agent openai:<model> needs OPENAI_API_KEY in the environment")
            key = "not-needed"           # local OpenAI-compatible servers usually take any key
        if base_url is not None:
            self.label = "openai-compatible"
        self._compat = base_url is not None
        self._client_args = dict(api_key=key, base_url=base_url, max_retries=0, timeout=policy.request_timeout_s)
        self._sdk = openai
        self._client = self._new_client()

    def _new_client(self):
        return self._sdk.OpenAI(**self._client_args)

    def _request(self, system, messages, max_tokens):
        msgs = [{"role": "system", "content": system}] + [{"role": m.role, "content": m.content} for m in messages]
        limit = {"max_tokens": max_tokens} if self._compat else {"max_completion_tokens": max_tokens}
        resp = self._client.chat.completions.create(model=self.model, messages=msgs, **limit)
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        u = resp.usage
        return text, (u.prompt_tokens if u else 0), (u.completion_tokens if u else 0)


class AnthropicProvider(Provider):
    label = "anthropic"

    def __init__(self, model: str, policy: RetryPolicy, budget: Budget, base_url: str | None = None, **kw):
        super().__init__(model, policy, budget, **kw)
        import anthropic

        key = os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise NotRunnable("--agent anthropic:<model> needs ANTHROPIC_API_KEY in the environment")
        self._client_args = dict(api_key=key, base_url=base_url, max_retries=0, timeout=policy.request_timeout_s)
        self._sdk = anthropic
        self._client = self._new_client()

    def _new_client(self):
        return self._sdk.Anthropic(**self._client_args)

    def _request(self, system, messages, max_tokens):
        resp = self._client.messages.create(model=self.model, system=system, max_tokens=max_tokens,
                                            messages=[{"role": m.role, "content": m.content} for m in messages])
        text = "".join(getattr(b, "text", "") for b in resp.content if getattr(b, "type", "") == "text")
        return text, resp.usage.input_tokens, resp.usage.output_tokens


def _short(exc: Exception) -> str:
    return scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:300]


def make_provider(spec: str, base_url: str | None, policy: RetryPolicy, budget: Budget, **kw) -> Provider:
    """`openai:<model>` or `anthropic:<model>` (UserError otherwise)."""
    kind, _, model = spec.partition(":")
    if not model:
        raise UserError(f"--agent {spec!r}: use template, openai:<model> or anthropic:<model>")
    if kind == "openai":
        return OpenAIProvider(model, policy, budget, base_url=base_url, **kw)
    if kind == "anthropic":
        return AnthropicProvider(model, policy, budget, base_url=base_url, **kw)
    raise UserError(f"unknown agent provider '{kind}' (use template, openai:<model> or anthropic:<model>)")
