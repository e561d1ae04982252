"""Where things live. The folder layout is part of the interface (see README)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def root() -> Path:
    """The project root: HARNESS_ROOT if set (tests use a temp copy), else the checkout."""
    return Path(os.environ.get("HARNESS_ROOT", REPO_ROOT)).resolve()


def checkout_of(folder: Path) -> Path | None:
    """The harness checkout that holds `folder` (it or a parent with harness/ and
    kernels_generated/), or None."""
    for d in (folder, *folder.parents):
        if (d / "harness" / "__init__.py").is_file() and (d / "kernels_generated").is_dir():
            return d
    return None


def other_checkout_note(cwd: Path | None = None) -> str | None:
    """A one-line note when the command runs inside another checkout than the one the harness
    works on (its files would be read and written there, not here); None otherwise."""
    if "HARNESS_ROOT" in os.environ:
        return None
    here = checkout_of((cwd or Path.cwd()).resolve())
    if here is None or here == root():
        return None
    return (f"this harness works on {root()} (where it is installed), not on the checkout {here} "
            f"you are in; run `pip install -e {here}` or set HARNESS_ROOT={here}")


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
