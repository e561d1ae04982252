"""compile_many: parallel sandboxed compiles return the same reports, in the caller's order,
as one at a time (real CuTe DSL compiles of a small committed candidate, no cache)."""
from __future__ import annotations

import threading

import pytest

from harness.errors import UserError
from harness.toolchain.candidate import list_candidates
from harness.toolchain.compile import compile_many, default_jobs


def _situ():
    return sorted(list_candidates("situ_and_mul"), key=lambda c: c.id)[0]


def test_default_jobs_env(monkeypatch):
    monkeypatch.setenv("HARNESS_COMPILE_JOBS", "3")
    assert default_jobs() == 3
    monkeypatch.setenv("HARNESS_COMPILE_JOBS", "0")
    assert default_jobs() == 1
    monkeypatch.setenv("HARNESS_COMPILE_JOBS", "many")
    with pytest.raises(UserError):
        default_jobs()
    monkeypatch.delenv("HARNESS_COMPILE_JOBS")
    assert 1 <= default_jobs() <= 8


@pytest.mark.slow
def test_parallel_compiles_match_serial_in_order(tmp_path):
    cand = _situ()
    combos = [("sm_90a", 8, {}), ("sm_103a", 16, {}), ("sm_90a", 16, {})]
    seen: list[tuple[str, int]] = []
    threads: set[str] = set()

    def done(rep):
        seen.append((rep.arch, rep.tp))
        threads.add(threading.current_thread().name)

    par = compile_many(cand, combos, jobs=3, use_cache=False, on_done=done)
    ser = compile_many(cand, combos, jobs=1, use_cache=False)
    assert [(r.arch, r.tp) for r in par] == [(a, t) for a, t, _ in combos]
    assert sorted(seen) == sorted((a, t) for a, t, _ in combos)
    assert threads == {threading.main_thread().name}          # callbacks stay on the caller's thread
    for p, s in zip(par, ser):
        assert p.ok and s.ok, (p.message, s.message)
        assert (p.max_registers, p.spill_bytes, p.global_loads_by_bits) == \
               (s.max_registers, s.spill_bytes, s.global_loads_by_bits)
