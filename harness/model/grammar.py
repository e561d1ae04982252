"""Structured output: grammar-constrained decoding from a JSON schema with llguidance.

One `JsonConstraint` per schema (the compiled grammar); one matcher per sequence. Each step
`allowed_mask` gives the tokens the grammar accepts next (bool [B, V]); after sampling,
`advance` feeds the chosen token to each live matcher. EOS is allowed exactly when the
document is complete, so a sequence ends with a schema-valid JSON text.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from .tokenizer import ByteTokenizer


def _llg():
    import llguidance  # noqa: PLC0415 - optional on the GPU machine

    return llguidance


@dataclass
class JsonConstraint:
    schema: dict[str, Any]
    tokenizer: ByteTokenizer
    _ll_tok: Any = field(default=None, repr=False)
    _grammar: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        llg = _llg()
        self._ll_tok = llg.LLTokenizer(llg.TokenizerWrapper(self.tokenizer), n_vocab=self.tokenizer.vocab_size)
        self._grammar = llg.LLMatcher.grammar_from_json_schema(
            json.dumps(self.schema), defaults={"whitespace_flexible": False})
        msg = llg.LLMatcher.validate_grammar(self._grammar, self._ll_tok)
        if msg and not msg.startswith("WARNING"):
            raise ValueError(f"JSON schema rejected by llguidance: {msg}")

    def matchers(self, n: int) -> list[Any]:
        return [_llg().LLMatcher(self._ll_tok, self._grammar) for _ in range(n)]

    def allowed_mask(self, matchers: list[Any]) -> torch.Tensor:
        """bool [B, V]: per row the tokens its matcher accepts (a stopped row: EOS only)."""
        vocab = self.tokenizer.vocab_size
        rows = []
        bit = torch.arange(8, dtype=torch.uint8)
        for m in matchers:
            if m.is_stopped() or m.is_error():
                row = torch.zeros(vocab, dtype=torch.bool)
                row[self.tokenizer.eos_token_id] = True
            else:
                raw = torch.frombuffer(bytearray(m.compute_bitmask()), dtype=torch.uint8)
                row = ((raw[:, None] >> bit) & 1).flatten()[:vocab].bool()   # little-endian bits
            rows.append(row)
        return torch.stack(rows)

    def advance(self, matchers: list[Any], tokens: list[int]) -> list[bool]:
        """Feed one token per row; False where the row is (now) in an error state."""
        ok = []
        for m, t in zip(matchers, tokens):
            if m.is_stopped():
                ok.append(t == self.tokenizer.eos_token_id)
                continue
            ok.append(bool(m.consume_token(int(t))))
        return ok


def validate(schema: dict[str, Any], text: str) -> bool:
    """Is `text` a JSON document valid under `schema`? (the subset our shipped schemas use:
    object/array/string/integer/number/boolean/enum/required/additionalProperties/bounds/pattern)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return _valid(schema, doc)


def _valid(s: dict[str, Any], v: Any) -> bool:
    if "enum" in s and v not in s["enum"]:
        return False
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(k not in v for k in s.get("required", [])):
            return False
        if s.get("additionalProperties") is False and any(k not in props for k in v):
            return False
        return all(_valid(props[k], x) for k, x in v.items() if k in props)
    if t == "array":
        if not isinstance(v, list):
            return False
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
            return False
        return all(_valid(s.get("items", {}), x) for x in v)
    if t == "string":
        if not isinstance(v, str) or not s.get("minLength", 0) <= len(v) <= s.get("maxLength", len(v)):
            return False
        return "pattern" not in s or re.search(s["pattern"], v) is not None
    if t in ("integer", "number"):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (t == "integer" and not isinstance(v, int)):
            return False
        return s.get("minimum", v) <= v <= s.get("maximum", v)
    if t == "boolean":
        return isinstance(v, bool)
    return True


class RowConstraints:
    """One constraint per row (rows of one batch may follow different schemas)."""

    def __init__(self, per_row: list[JsonConstraint]) -> None:
        self.per_row = per_row

    def matchers(self, n: int) -> list[Any]:
        if n != len(self.per_row):
            raise ValueError(f"{len(self.per_row)} constraints for {n} rows")
        return [c.matchers(1)[0] for c in self.per_row]

    def allowed_mask(self, matchers: list[Any]) -> torch.Tensor:
        return torch.cat([c.allowed_mask([m]) for c, m in zip(self.per_row, matchers)])

    def advance(self, matchers: list[Any], tokens: list[int]) -> list[bool]:
        return [c.advance([m], [t])[0] for c, m, t in zip(self.per_row, matchers, tokens)]
