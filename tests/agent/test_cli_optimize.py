"""`harness optimize` as a process: the progress lines a log file gets when stderr is not a
terminal (a run on a lent machine; session 24's device log of a whole run was empty)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_optimize_writes_timestamped_progress_lines_when_stderr_is_a_file(harness_root):
    r = subprocess.run([sys.executable, "-m", "harness.cli", "optimize", "--op", "moe_router", "--agent",
                        "openai:gpt-4o", "--time-limit", "0", "--json"], capture_output=True, text=True,
                       cwd=REPO, env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    said = [ln.split("] ", 1)[1] for ln in lines]
    assert said[:2] == ["run started", "stopped: time limit reached"] and said[3:] == ["run finished"]
    assert said[2].startswith("gates not run: no candidate")
    assert all(ln.startswith("[") and " s] " in ln for ln in lines)
    summary = json.loads(r.stdout)                       # stdout stays pure JSON
    assert summary["stopped"] == "time limit reached" and summary["candidates"] == 0
