"""Fixtures shared by every test folder."""
from __future__ import annotations

from typing import Callable

import pytest

from harness.cli import main

CliRun = Callable[[list[str]], tuple[int, str, str]]


@pytest.fixture
def run_cli(capsys) -> CliRun:
    """run_cli(argv) -> (exit code, stdout, stderr) of `harness <argv>` run in-process."""
    def run(argv: list[str]) -> tuple[int, str, str]:
        code = 0
        try:
            main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err
    return run
