"""Every cheat fixture: refused by the static gate with its rule named, or (GPU-only
cheats) clean enough to reach the GPU gate that must reject it."""
from __future__ import annotations

import pytest
import torch

from harness.selftest.cheats import CHEATS, run_cheats


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return {r["name"]: r for r in run_cheats(tmp_path_factory.mktemp("cheats"), compile_gpu_only=False, gpu=False)}


@pytest.mark.parametrize("cheat", [c for c in CHEATS if c.static_rules], ids=lambda c: c.name)
def test_static_cheats_rejected_with_rule(rows, cheat):
    r = rows[cheat.name]
    assert r["static_verdict"] == "fail" and r["status"] == "PASS"
    assert set(cheat.static_rules) <= set(r["static_rules"])


@pytest.mark.parametrize("cheat", [c for c in CHEATS if not c.static_rules], ids=lambda c: c.name)
def test_gpu_only_cheats_reach_their_gate(rows, cheat):
    r = rows[cheat.name]
    assert r["static_verdict"] == "pass" and r["reaches_gpu_gate"] and r["status"] == "NOT_RUN"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_cheats_rejected_on_gpu(tmp_path):
    rows = run_cheats(tmp_path, compile_gpu_only=True, gpu=True)
    bad = [r for r in rows if r["status"] != "PASS"]
    assert not bad, bad
