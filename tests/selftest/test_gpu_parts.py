"""The GPU parts of the selftest (harness/selftest/gpu.py, scripts/gpu/selftest_gpu.py) on
the CPU: every CuTe DSL fixture they run compiles for sm_90a, the numerics_unit check
names are read off the gate's own reasons, and the script's JSON feeds `harness selftest`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from harness import paths
from harness.selftest import gpu as G
from harness.selftest.cheats import land
from harness.selftest.report import Section, Status
from harness.toolchain import check_candidate, compile_candidate
from harness.toolchain.verdict import Verdict

SCRIPT = paths.REPO_ROOT / "scripts" / "gpu" / "selftest_gpu.py"


def _compile_all(cands, tmp_path, tps=None):
    jobs = [(c, tp) for c in cands for tp in (tps or c.scope.tp)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        reps = list(pool.map(lambda j: compile_candidate(j[0], "sm_90a", j[1], cache_root=tmp_path / "cache"), jobs))
    return {f"{c.op}/{c.id[:12]} TP{tp}": r for (c, tp), r in zip(jobs, reps)}


def test_gpu_fault_and_cheat_fixtures_compile_for_sm90a(tmp_path):
    cands = [G.land_fault(f.name, tmp_path) for f in G.GPU_FAULTS]
    cands += [land(ch.name, tmp_path) for ch in G.gpu_cheats()]
    bad = {k: f"{r.verdict.value}: {r.message} {r.diagnostics[:300]}"
           for k, r in _compile_all(cands, tmp_path, tps=[8]).items() if r.verdict is not Verdict.OK}
    assert not bad, bad


@pytest.mark.slow
def test_gpu_cheats_compile_at_every_tp_in_scope(tmp_path):
    reps = _compile_all([land(ch.name, tmp_path) for ch in G.gpu_cheats()], tmp_path)
    assert all(r.verdict is Verdict.OK for r in reps.values()), {k: r.message for k, r in reps.items() if not r.ok}


def test_launch_variants_fault_only_in_launch():
    honest = G._honest()
    for name in G.LAUNCH_VARIANTS:
        src = G.fault_source(name)
        assert src != honest and "raise RuntimeError" in src.split("def launch", 1)[1]
        assert src.split("def launch", 1)[0] == honest.split("def launch", 1)[0]


def test_device_loop_rereads_global_memory_and_stores_each_iteration():
    src = G.fault_source("device_loop")
    loop = src.split("while ", 1)[1].split("\n\n", 1)[0]
    assert "mX[row, col]" in loop and "mO[row, col] =" in loop


def test_honest_candidate_passes_static_checks(tmp_path):
    assert check_candidate(G.land_fault("honest", tmp_path, G._honest())).ok


def test_check_names_come_from_the_gates_own_reasons():
    from gates.numerics_unit import ADVERSARIAL, decide

    def sample(i, kind="random", **kw):
        return {"point": "B1_TP8", "kind": kind, "seed": i, "ok": True, "summary": "", "mutated": [],
                "deterministic": True, **kw}

    clean = [sample(i) for i in range(3)] + [sample(100 + i, k) for i, k in enumerate(ADVERSARIAL)]
    for bad, want in (({"ok": False, "summary": "out: NaN"}, "accuracy"), ({"mutated": ["gate_up"]}, "input_mutation"),
                      ({"deterministic": False}, "determinism")):
        verdict, reasons = decide([clean[0] | bad] + clean[1:], ["B1_TP8"], 3)
        assert verdict.value == "fail" and G.named_checks(reasons) == [want], reasons
    assert G.named_checks(decide(clean[:2], ["B1_TP8"], 3)[1]) == ["coverage"]
    assert decide(clean, ["B1_TP8"], 3)[0].value == "pass"


@pytest.fixture(scope="module")
def script_json(tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    r = subprocess.run([sys.executable, str(SCRIPT)], env={**os.environ, "OUT": str(out)}, capture_output=True,
                       text=True, timeout=300)
    return r, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_script_without_gpu_writes_every_case_not_run(script_json):
    r, out = script_json
    assert r.returncode == 1, r.stderr
    d = G.load_gpu_results(out / "selftest_gpu.json")
    assert [x["name"] for x in d["faults"]] == [f.name for f in G.GPU_FAULTS]
    assert sorted(x["name"] for x in d["cheats"]) == sorted(c.name for c in G.gpu_cheats())
    assert all(x["status"] == "NOT_RUN" for x in d["faults"] + d["cheats"]) and not d["ok"]
    assert (out / "selftest_gpu.txt").read_text().count("NOT_RUN") == len(d["faults"]) + len(d["cheats"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_ingested_results_replace_not_run_rows(script_json):
    d = G.load_gpu_results(script_json[1] / "selftest_gpu.json")
    s = Section("faults", "1")
    G.add_fault_figures(s, d["faults"])
    G.add_cheat_figures(s, d["cheats"])
    assert not any(f.status is Status.NOT_RUN for f in s.figures)
    assert s.status is Status.FAIL          # nothing ran: never a pass
    good = [{"name": f.name, "verdict": f.expected.value, "ok": True, "canary_ok": True, "cascade_ok": True,
             "workers_left": 0} for f in G.GPU_FAULTS]
    s2 = Section("faults", "1")
    G.add_fault_figures(s2, good)
    G.add_cheat_figures(s2, [{"name": c.name, "status": "PASS", "checks": ["accuracy"]} for c in G.gpu_cheats()])
    assert s2.status is Status.PASS


def test_cli_refuses_a_file_that_is_not_gpu_results(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"schema": "something else"}))
    r = subprocess.run([sys.executable, "-m", "harness.cli", "selftest", "--only", "cli", "--gpu-results", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "selftest_gpu.py" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_one_fault_and_one_cheat_run_their_real_paths_without_gpu(tmp_path):
    """The whole path the H200 runs (eval worker, canary, honest eval; sandboxed
    numerics_unit in a pinned root): here every GPU stage says NOT_RUN, never PASS."""
    honest = G.land_fault("honest", tmp_path, G._honest())
    row = G.run_gpu_fault(G.GPU_FAULTS[2], tmp_path, tmp_path / "cache", honest)
    assert row["verdict"] == "NOT_RUN" and not row["gpu_run"] and row["status"] == "FAIL"
    assert row["workers_left"] == 0 and row["canary_ok"] is False and row["honest_verdict"] == "NOT_RUN"
    cheat = G.gpu_cheats()[0]
    crow = G.run_gpu_cheat(cheat, G.cheat_root(tmp_path / "root"), 120.0)
    assert crow["reaches_gpu_gate"] and crow["verdict"] == "not_run" and not crow["rejected"]
    assert crow["status"] == "FAIL" and "needs a CUDA GPU" in crow["reasons"][0]


def test_device_loop_survives_compilation_as_a_loop_on_a_global_load(tmp_path):
    """The PTX keeps a backward branch whose condition is a value re-loaded from global
    memory each time round (the compare cannot be folded: the sentinel is a bf16 value)."""
    import re

    from harness.toolchain.sandbox import run_job

    job = {"kind": "compile", "kernel_path": str(G.fixtures_dir() / "device_loop.py"), "arch": "sm_90a", "tp": 8,
           "static": {}, "options": "--enable-tvm-ffi", "dump_dir": str(tmp_path)}
    assert run_job(job, 300.0, cwd=tmp_path).verdict is Verdict.OK
    ptx = "\n".join(p.read_text() for p in tmp_path.rglob("*.ptx"))
    loops = re.findall(r"^(\$L__BB\d+_\d+):\n(.*?)\n\s*@%p\d+ bra\s+\1;", ptx, flags=re.M | re.S)
    assert loops and all(w in loops[0][1] for w in ("ld.global", "st.global", "setp.")), ptx[-1500:]


def test_workers_left_counts_only_the_workers_this_fault_left(tmp_path, monkeypatch):
    """workers_left is the eval workers a fault leaves alive. Another harness run's workers on the same
    machine (an agent loop, a second test run: session 64's CI counted two) were alive before the fault
    and are not counted; a worker the fault's eval leaves behind is."""
    import time
    from types import SimpleNamespace

    import harness.toolchain as T

    def marked() -> subprocess.Popen:          # a process whose command line carries the worker's mark
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", G.WORKER_MARK])
        for _ in range(500):                   # until it has exec'd (before, /proc shows pytest's cmdline)
            if p.pid in G.workers_alive():
                return p
            time.sleep(0.01)
        raise AssertionError("the marked process never showed its command line")

    other = marked()
    leaked: list[subprocess.Popen] = []

    def fake_eval(cand, timeout_s, cache_root, check_static):
        if not check_static:                   # the fault's eval leaves one worker behind
            leaked.append(marked())
        return SimpleNamespace(verdict=Verdict.OK if check_static else Verdict.TIMEOUT, message="", gpu_run=True,
                               wall_s=1.0, worker_log_tail="")

    monkeypatch.setattr(G, "_eval", fake_eval)
    monkeypatch.setattr(T, "run_canary", lambda: True)
    try:
        honest = G.land_fault("honest", tmp_path, G._honest())
        fault = next(f for f in G.GPU_FAULTS if f.expected is Verdict.TIMEOUT)
        row = G.run_gpu_fault(fault, tmp_path, tmp_path / "cache", honest)
        assert other.pid in G.workers_alive() and leaked and leaked[0].pid in G.workers_alive()
        assert row["workers_left"] == 1 and row["status"] == "FAIL"
        first = leaked.pop()
        first.kill()
        first.wait()
        row = G.run_gpu_fault(fault, tmp_path, tmp_path / "cache2", honest)
        assert row["workers_left"] == 1                    # the second run's own leak, not the first's
        second = leaked.pop()
        second.kill()
        second.wait()
        monkeypatch.setattr(G, "_eval", lambda c, t, r, check_static: SimpleNamespace(
            verdict=Verdict.OK if check_static else Verdict.TIMEOUT, message="", gpu_run=True, wall_s=1.0,
            worker_log_tail=""))
        row = G.run_gpu_fault(fault, tmp_path, tmp_path / "cache3", honest)
        assert row["workers_left"] == 0 and row["ok"] and row["status"] == "PASS"   # `other` still runs
        assert other.poll() is None
    finally:
        for p in [other, *leaked]:
            p.kill()
            p.wait()
