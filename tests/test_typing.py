"""The type check: mypy over harness/, gates/, reference_impls/, scripts/*.py and scripts/gpu/*.py, configured in
pyproject.toml ([tool.mypy]). Annotations that disagree with the code are found here, not by a
reader who trusted them."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_packages_and_scripts_type_check(tmp_path, monkeypatch):
    from mypy import api

    monkeypatch.chdir(ROOT)             # [tool.mypy] files are relative to the project root
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache")])
    assert status == 0, out + err
    assert "Success: no issues found" in out
