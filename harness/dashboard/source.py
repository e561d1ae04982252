"""Kernel source for the page: syntax highlighting (pygments, run here, so the page needs
no script or stylesheet from the network) and unified diffs rendered as HTML rows."""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from html import escape

from markupsafe import Markup


def highlight_python(source: str) -> Markup:
    """One <span class="ln"> per line, tokens wrapped in pygments' short CSS classes
    (styled by static/style.css); plain escaped text if pygments is unavailable."""
    lines: list[str]
    cur: list[str]
    try:
        from pygments.lexers import PythonLexer  # type: ignore[import-untyped]
        from pygments.token import STANDARD_TYPES  # type: ignore[import-untyped]
    except ImportError:
        lines = [escape(ln) for ln in source.split("\n")]
    else:
        lines, cur = [], []
        for ttype, value in PythonLexer(stripnl=False, ensurenl=False).get_tokens(source):
            while ttype not in STANDARD_TYPES:
                ttype = ttype.parent
            cls = STANDARD_TYPES[ttype]
            for i, part in enumerate(value.split("\n")):
                if i:                      # a token spanning lines (a docstring) is closed per line
                    lines.append("".join(cur))
                    cur = []
                if part:
                    cur.append(f'<span class="{cls}">{escape(part)}</span>' if cls else escape(part))
        lines.append("".join(cur))
    if lines and lines[-1] == "":
        lines.pop()
    rows = "".join(f'<span class="ln" data-n="{i}">{ln}</span>\n' for i, ln in enumerate(lines, 1))
    return Markup(f'<pre class="code">{rows}</pre>')


@dataclass
class DiffStat:
    added: int
    removed: int


def unified_diff(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> tuple[Markup, DiffStat]:
    """The diff as <pre> rows classed add / del / hunk / meta, and its line counts."""
    rows, add, rem = [], 0, 0
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm="", n=context):
        if line.startswith(("+++", "---")):
            cls = "meta"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls, add = "add", add + 1
        elif line.startswith("-"):
            cls, rem = "del", rem + 1
        else:
            cls = "ctx"
        rows.append(f'<span class="{cls}">{escape(line)}</span>')
    if not rows:
        return Markup('<p class="muted">identical source</p>'), DiffStat(0, 0)
    return Markup('<pre class="diff">' + "\n".join(rows) + "</pre>"), DiffStat(add, rem)


def pygments_css() -> str:
    """The token colours (a light theme), generated here and shipped in style.css."""
    try:
        from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
    except ImportError:
        return ""
    return HtmlFormatter(style="default").get_style_defs(".code")
