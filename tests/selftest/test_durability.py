"""optimize killed with SIGKILL and resumed; atomic writers killed mid-write."""
from __future__ import annotations

import pytest

from harness.selftest.durability import run_durability


@pytest.mark.slow
def test_kills_lose_and_duplicate_nothing(tmp_path):
    d = run_durability(kills=5, atomic=5, root=tmp_path, seed=7)
    assert d["kills"] >= 5 and d["atomic_kills"] == 5 and d["append_kills"] == 5
    assert (d["lost"], d["duplicated"], d["unparsable"], d["seq_errors"], d["unfinished"]) == (0, 0, 0, 0, 0), d
    assert d["torn_summaries"] == 0 and d["torn_logs"] == 0 and d["append_seq_errors"] == 0, d
