"""The CLI's progress bars: on stderr, and only when stderr is a terminal.

stdout stays the command's output alone (tables, JSON), so a pipe or a log reads the same with or
without a bar; rich also writes a newline to its stream when a transient bar stops on a
non-terminal, which used to put a stray blank line ahead of every piped `compile`, `eval` and
`eval-model` (and of the error of a mistake caught once the bar had started)."""
from __future__ import annotations

from rich.console import Console
from rich.progress import Progress


def progress_bar(disable: bool = False) -> Progress:
    """A transient rich Progress on stderr; shows nothing when `disable` or stderr is no terminal."""
    con = Console(stderr=True)
    return Progress(console=con, transient=True, disable=disable or not con.is_terminal)
