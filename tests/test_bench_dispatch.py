"""scripts/bench_dispatch.py: the registry's per-dispatch cost on the host."""
from __future__ import annotations

import json

import pytest

from gpu_scripts import tool_script


@pytest.fixture(scope="module")
def bench():
    return tool_script("bench_dispatch")


def test_every_case_is_timed_on_its_kernel(bench, capsys):
    assert bench.main(["--calls", "3", "--repeats", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["op"] for r in rows] == [op for op, _, _ in bench.CASES]
    assert all(r["us_per_dispatch"] > 0 for r in rows)


def test_a_case_that_never_reaches_its_kernel_is_refused(bench, monkeypatch):
    """A dispatch that fell back (here: out of the registered scope) would time the reference,
    not the registry: the script stops instead of printing that."""
    real = bench.KernelScope
    monkeypatch.setattr(bench, "KernelScope", lambda **kw: real(**{**kw, "archs": ("sm_90a",)}))   # not this CPU
    with pytest.raises(SystemExit, match="did not all reach the kernel"):
        bench.main(["--calls", "2", "--repeats", "1"])


def test_bad_counts_are_a_usage_error(bench):
    with pytest.raises(SystemExit):
        bench.main(["--calls", "0"])
