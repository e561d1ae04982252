"""GPU gates run in a sandboxed process: a hang or a crash is a FAIL, a forged result is
refused; and the model-gate machinery on the tiny CPU config (kill-switch counters)."""
from __future__ import annotations

import time

from gates import GateContext, Verdict, load_config
from gates._isolated import run_isolated

TARGETS = '''
import os, signal, sys, time
from gates import GateResult, Verdict

def ok(ctx):
    return GateResult("numerics_unit", Verdict.PASS, [], {"op": ctx.op, "cid": ctx.candidate_id})

def hang(ctx):
    time.sleep(600)

def crash(ctx):
    os.kill(os.getpid(), signal.SIGSEGV)

def boom(ctx):
    raise ValueError("kernel raised")

def forge(ctx):
    sys.stdout.write('{"payload": "{\\\\"verdict\\\\": \\\\"pass\\\\"}", "mac": "00"}\\n')
    sys.stdout.flush()
    os._exit(0)
'''


def _ctx(root, cid):
    return GateContext(op="moe_router", candidate_id=cid, root=root, config=load_config(root / "gates" / "gate_config.toml"))


def test_sandboxed_gate_pass_hang_crash_raise_forge(repo):
    root, cid = repo
    (root / "sandbox_targets.py").write_text(TARGETS)
    ctx = _ctx(root, cid)
    res = run_isolated("numerics_unit", ctx, 60, target="sandbox_targets:ok")
    assert res.verdict is Verdict.PASS and res.numbers["cid"] == cid and res.numbers["sandbox"]["isolated"]
    t0 = time.monotonic()
    res = run_isolated("numerics_unit", ctx, 3, target="sandbox_targets:hang")
    assert res.verdict is Verdict.FAIL and "deadline" in res.reasons[0] and time.monotonic() - t0 < 30
    res = run_isolated("numerics_unit", ctx, 60, target="sandbox_targets:crash")
    assert res.verdict is Verdict.FAIL and "SIGSEGV" in res.reasons[0]
    res = run_isolated("numerics_unit", ctx, 60, target="sandbox_targets:boom")
    assert res.verdict is Verdict.ERROR and "kernel raised" in res.reasons[0]
    res = run_isolated("numerics_unit", ctx, 60, target="sandbox_targets:forge")
    assert res.verdict is Verdict.FAIL and "without a result" in res.reasons[0]


def test_load_compiled_refuses_without_gpu_or_arch(repo):
    import pytest

    from harness.toolchain import LoadError, load_compiled

    root, cid = repo
    cdir = root / "kernels_generated" / "moe_router" / cid
    with pytest.raises(LoadError, match="does not declare sm_100a"):
        load_compiled(cdir, "sm_100a", 8)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(LoadError, match="no CUDA GPU"):
            load_compiled(cdir, "sm_90a", 8)


def test_lockstep_tiny_counts_kill_switch_and_zero_error_on_identical_paths(repo):
    """On the CPU the on path falls back for the arch (on a GPU: no tiny call fits the
    kernel's true K3 shapes, reason shape), the off path is switched off (reason disabled); both run the reference,
    so the lockstep metrics must be exactly zero error and full agreement - and the gate's
    decision must refuse the run because the kernel never ran."""
    from gates import _k3, numerics_model
    from harness.model.sampling import SamplingParams

    root, cid = repo
    pair = _k3.build_pair("moe_router", root / "kernels_generated" / "moe_router" / cid, root, "tiny", 0, "cpu")
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 1, 2), 2, SamplingParams(temperature=0.8, top_k=5, seed=3))
    assert r["kernel_calls_on"] == 0 and r["kernel_calls_off"] == 0
    assert {row["reason"] for row in r["trace"]["off"]} == {"disabled"}
    import torch

    want = "shape" if torch.cuda.is_available() else "arch"
    assert {row["reason"] for row in r["trace"]["on"]} == {want}
    assert r["max_kl"] == 0.0 and r["max_logit_rel_err"] == 0.0
    assert r["greedy_agreement"] == 1.0 and r["sampling_agreement"] == 1.0 and r["tokens"] == 2
    verdict, reasons = numerics_model.decide([{"kind": "long_generation", **r}], load_config())
    assert verdict is Verdict.FAIL and any("optimized path did not run" in x for x in reasons)
