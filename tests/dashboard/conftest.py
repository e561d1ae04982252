"""One fixture project and one built site per session (building imports torch and runs the
CPU gates once; every test then reads the same site)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dashboard_fixture_repo import build_root


@dataclass
class Site:
    root: Path
    out: Path
    ids: dict[str, str]


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Site:
    from harness.dashboard import build

    base = tmp_path_factory.mktemp("dash")
    root = base / "repo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HARNESS_ROOT", str(root))
        mp.delenv("HARNESS_GATE_BASE", raising=False)
        ids = build_root(root)
        build(root, base / "site")
    return Site(root=root, out=base / "site", ids=ids)
