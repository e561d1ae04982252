"""The real OpenAI SDK path against a hostile local server: bounded retries, deadlines."""
from __future__ import annotations

import pytest

from harness.selftest import llm_faults as L


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-selftest-" + "1" * 24)


@pytest.fixture(scope="module")
def rows():
    import os

    os.environ.setdefault("OPENAI_API_KEY", "sk-selftest-" + "1" * 24)
    return {r["name"]: r for r in L.run_provider_scenarios()}


@pytest.mark.parametrize("name", [n for n in L.SCENARIOS if n != "slow_drip_body"])
def test_scenario(rows, name):
    r = rows[name]
    assert r["ok"], r


def test_slow_drip_keeps_the_deadline(rows):
    r = rows["slow_drip_body"]
    assert r["wall_s"] <= r["bound_s"], r
