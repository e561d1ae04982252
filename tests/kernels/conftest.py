"""Shared fixtures: the human family points and their rendered modules (imported once)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernel_helpers import ROOT, load_module

sys.path.insert(0, str(ROOT / "prompts" / "kernels"))
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")     # before any cutlass import

import render_human  # noqa: E402


@pytest.fixture(scope="session")
def human_points() -> list[dict]:
    return render_human.human_points()


@pytest.fixture(scope="session")
def router_module():
    """The default point of the moe_router family, rendered to a temp file and imported."""
    from harness.agent.families import load_family

    fam = load_family(ROOT / "prompts/kernels/moe_router/splitk_topk.py.j2", "moe_router")
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="router-family-"))
    (d / "kernel.py").write_text(fam.render(fam.start()))
    return load_module(d / "kernel.py", "router_family_default")
