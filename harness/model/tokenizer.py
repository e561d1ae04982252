"""Byte-level tokenizer over the model's vocabulary: ids 0..255 are bytes, then EOS and
BOS; every id above is an unused special token (never produced, never allowed by a grammar).
Good enough for a test model with random weights; a real K3 tokenizer plugs in the same way."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ByteTokenizer:
    vocab_size: int
    eos_token_id: int = 256
    bos_token_id: int = 257

    def __post_init__(self) -> None:
        if self.vocab_size < 258:
            raise ValueError(f"a byte tokenizer needs a vocabulary of >= 258 ids, not {self.vocab_size}")

    def encode(self, text: str, bos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos_token_id] + ids if bos else ids

    def decode_bytes(self, ids: list[int]) -> bytes:
        return bytes(i for i in ids if i < 256)

    def decode(self, ids: list[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    # ---- llguidance's TokenizerWrapper protocol ----------------------------------------
    @property
    def tokens(self) -> list[bytes]:
        return [bytes([i]) for i in range(256)] + [b"<eos>", b"<bos>"] + \
            [b"<unused_%d>" % i for i in range(self.vocab_size - 258)]

    @property
    def special_token_ids(self) -> list[int]:
        return list(range(256, self.vocab_size))

    def __call__(self, s: str | bytes) -> list[int]:
        return list(s.encode("utf-8") if isinstance(s, str) else s)
