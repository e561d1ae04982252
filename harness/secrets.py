"""Keeping API keys out of everything the harness writes.

Keys come only from the environment. Anything written under runs/ (events, prompts,
replies, errors) passes through `scrub`, which replaces every known key value and
anything shaped like a provider key with a placeholder.
"""
from __future__ import annotations

import os
import re

# Environment variables that may hold provider credentials.
KEY_ENV_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HARNESS_LLM_API_KEY")

# Shapes of provider keys (OpenAI sk-..., Anthropic sk-ant-..., bearer tokens in headers).
_KEY_PATTERNS = (
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"(?i)(authorization|x-api-key|api[_-]?key)(\"?\s*[:=]\s*\"?)(bearer\s+)?[^\s\",}]+"),
)

REDACTED = "[REDACTED]"


def key_values() -> list[str]:
    """The secret values currently in the environment (longest first, non-trivial only)."""
    vals = {os.environ.get(v, "") for v in KEY_ENV_VARS}
    vals.update(v for k, v in os.environ.items()
                if any(m in k.upper() for m in ("_API_KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")))
    return sorted((v for v in vals if len(v) >= 8), key=len, reverse=True)


def scrub(text: str, extra: list[str] | None = None) -> str:
    """`text` with every key value and key-shaped token replaced by REDACTED."""
    for val in (extra or []) + key_values():
        if val:
            text = text.replace(val, REDACTED)
    text = _KEY_PATTERNS[0].sub(REDACTED, text)
    return _KEY_PATTERNS[1].sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)


def scrub_obj(obj):
    """Scrub every string inside a JSON-like structure."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_obj(v) for v in obj]
    return obj
