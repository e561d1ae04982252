"""Fixtures of the gate tests (helpers in gate_repo_helpers.py)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from gate_repo_helpers import REPO, git, make_candidate


@pytest.fixture
def repo(tmp_path, monkeypatch) -> tuple[Path, str]:
    root = tmp_path / "repo"
    root.mkdir()
    for d in ("gates", "harness", "reference_impls"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("__pycache__/\n")
    cid = make_candidate(root)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "test")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    monkeypatch.delenv("HARNESS_GATE_BASE", raising=False)
    return root, cid


@pytest.fixture
def one_torch_thread():
    """The K3 pair tests decode tiny configs on the CPU with one torch thread (the CI box has 2
    cores); use as `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
