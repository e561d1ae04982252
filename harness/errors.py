"""Errors a user can cause. The CLI prints them as one line on stderr and exits 2;
anything else is a bug and keeps its traceback."""
from __future__ import annotations


class UserError(Exception):
    """Bad input from the person or the agent at the keyboard: unknown op, batch out of
    range, malformed candidate folder, missing API key, no GPU for a GPU-only verb."""

    exit_code = 2


class NotRunnable(UserError):
    """The work needs something this machine lacks (a GPU, a key); exit 3."""

    exit_code = 3
