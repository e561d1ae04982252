"""Where things live. The folder layout is part of the interface (see README)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def root() -> Path:
    """The project root: HARNESS_ROOT if set (tests use a temp copy), else the checkout."""
    return Path(os.environ.get("HARNESS_ROOT", REPO_ROOT)).resolve()


def kernels_dir() -> Path:
    return root() / "kernels_generated"


def runs_dir() -> Path:
    return root() / "runs"


def prompts_dir() -> Path:
    return root() / "prompts"


def promoted_manifest() -> Path:
    return kernels_dir() / "promoted.json"


def cache_dir() -> Path:
    """Compile cache (persistent, outside the tracked tree)."""
    return Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "k3-harness")).resolve()
