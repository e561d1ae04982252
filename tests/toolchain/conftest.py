"""Shared fixtures of the toolchain tests: candidates built from tests/fixtures/candidates
in a temp kernels_generated, and one compile cache for the whole session (each real
compile costs seconds)."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.toolchain import Provenance, Scope, create_candidate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "candidates"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="session")
def kroot(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kernels_generated")


@pytest.fixture(scope="session")
def make_fixture(kroot):
    """make_fixture("segfault") -> a Candidate of moe_router whose kernel.py is that fixture."""
    def make(name: str, scope: Scope | None = None):
        src = (FIXTURES / f"{name}.py").read_text()
        return create_candidate("moe_router", src, scope or Scope(tp=(8,)), Provenance("human"), root=kroot)
    return make
