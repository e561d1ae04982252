"""Taking a kernel out of an untrusted LLM reply.

Only the body of a fenced ```python block is used; prose, other blocks and any
instructions in the reply are ignored. The harness alone decides where the code is
written (the candidate folder), its scope and its provenance.
"""
from __future__ import annotations

import ast
import enum
import re
import threading
from dataclasses import dataclass

MAX_KERNEL_BYTES = 64 * 1024          # a kernel module is a few hundred lines at most

_FENCE_RE = re.compile(r"^```[ \t]*([A-Za-z0-9_+\-.]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


class ReplyProblem(str, enum.Enum):
    NO_CODE = "no_code"                # no fenced python block
    AMBIGUOUS = "ambiguous"            # several blocks define the module API
    TOO_LARGE = "too_large"
    SYNTAX = "syntax"
    MISSING_API = "missing_api"        # no module-level compile() and launch()


@dataclass(frozen=True)
class Extracted:
    code: str | None
    problem: ReplyProblem | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.problem is None


# CPython 3.11 keeps the AST constructor's recursion counter in state the threads share, so two
# threads turning source into ast nodes at once can fail with "SystemError: AST constructor
# recursion depth mismatch" (python/cpython#106905; CI hit it with the loop's parallel drafts).
# Parses are short: one at a time costs nothing.
_PARSE_LOCK = threading.Lock()


def parse_module(source: str) -> ast.Module:
    """ast.parse, one thread at a time (see _PARSE_LOCK); raises SyntaxError as ast.parse does."""
    with _PARSE_LOCK:
        return ast.parse(source)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(text)]


def _defines_api(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("compile", "launch")}


def extract_kernel(reply: str) -> Extracted:
    """The kernel module in `reply`, or the reason there is none."""
    blocks = [b for lang, b in fenced_blocks(reply) if lang in ("python", "py", "")]
    if not blocks:
        return Extracted(None, ReplyProblem.NO_CODE, "the reply has no ```python fenced block")
    parsed: list[tuple[str, ast.Module | None, str]] = []
    for body in blocks:
        try:
            parsed.append((body, parse_module(body), ""))
        except SyntaxError as exc:
            parsed.append((body, None, f"line {exc.lineno}: {exc.msg}"))
    full = [(b, t) for b, t, _ in parsed if t is not None and _defines_api(t) == {"compile", "launch"}]
    if len(full) > 1:
        return Extracted(None, ReplyProblem.AMBIGUOUS, f"{len(full)} blocks define compile() and launch(); send one")
    if full:
        code = full[0][0]
    else:
        body, tree, err = max(parsed, key=lambda p: len(p[0]))
        if tree is None:
            return Extracted(None, ReplyProblem.SYNTAX, f"python block does not parse: {err}")
        missing = {"compile", "launch"} - _defines_api(tree)
        return Extracted(None, ReplyProblem.MISSING_API, "module-level function(s) missing: " + ", ".join(sorted(missing)))
    if len(code.encode()) > MAX_KERNEL_BYTES:
        return Extracted(None, ReplyProblem.TOO_LARGE, f"kernel is {len(code.encode())} bytes (limit {MAX_KERNEL_BYTES})")
    return Extracted(code if code.endswith("\n") else code + "\n")
