"""`harness compile` / `harness eval` end to end on the CPU (GPU stages must say "not run"),
and the GPU tests the lead runs on the H200 (scripts/gpu/toolchain_smoke.sh)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from harness.opdef import Point
from harness.toolchain import Evaluator, Verdict, list_candidates

from .conftest import REPO


def _cli(args, cache_root):
    env = {**os.environ, "HARNESS_CACHE": str(cache_root)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_eval_without_gpu_compiles_and_reports_gpu_stages_not_run(make_fixture, cache_root):
    cand = make_fixture("wrong_answer")
    r = _cli(["eval", "moe_router", str(cand.path), "--batch", "1,8", "--tp", "8,16", "--json"], cache_root)
    assert r.returncode == 3, r.stderr
    rep = json.loads(r.stdout)
    assert rep["verdict"] == "NOT_RUN" and rep["gpu_run"] is False and rep["points"] == []
    assert {c["arch"] for c in rep["compiles"]} == {"sm_90a", "sm_100a", "sm_103a"}
    assert {c["tp"] for c in rep["compiles"]} == {8, 16}          # `--tp 8,16` as README's "Bring your own GPU"
    assert all(c["verdict"] == "OK" for c in rep["compiles"])


def test_compile_cli_reports_static_reject_and_user_errors(make_fixture, cache_root):
    r = _cli(["compile", "moe_router", "no-such-candidate"], cache_root)
    assert r.returncode == 2 and "not found" in r.stderr and "Traceback" not in r.stderr
    r = _cli(["eval", "kda_decode", "7eee43", "--state-dtype", "fp32,fp16"], cache_root)
    assert r.returncode == 2 and "not fp16" in r.stderr and "Traceback" not in r.stderr
    r = _cli(["eval", "skinny_gemm", "fcb21b", "--shape", "mla_qkv_a,nope"], cache_root)
    assert r.returncode == 2 and "unknown shape 'nope'" in r.stderr and "Traceback" not in r.stderr
    r = _cli(["compile", "moe_router", str(make_fixture("segfault").path), "--json"], cache_root)
    assert r.returncode == 1 and json.loads(r.stdout)["verdict"] == "STATIC_REJECT"


# ---- GPU (H200): run by scripts/gpu/toolchain_smoke.sh ------------------------------------
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_wrong_and_illegal_kernels_are_classified_and_the_next_good_one_still_passes(make_fixture, cache_root):
    from harness.agent.stages import promoted_candidate

    # the promoted router (the first human one, 9d6bff, picks near-tied experts in another order,
    # which harness.compare misjudges on the weights: see tests/reference_impls/test_refimpl_routing.py)
    good = promoted_candidate("moe_router")
    ev = Evaluator(cache_root=cache_root, time_it=False, archs=["sm_90a"])
    points = [Point(batch=1), Point(batch=7)]
    wrong = ev.evaluate(make_fixture("wrong_answer"), points)
    assert wrong.verdict is Verdict.WRONG, wrong.message
    bad = ev.evaluate(make_fixture("illegal_address"), points)
    assert bad.verdict is Verdict.CUDA_ERROR, (bad.verdict, bad.message, bad.worker_log_tail)
    assert ev.needs_canary
    ok = ev.evaluate(good, points + [Point(batch=64)])
    assert ev.canary_runs == 1 and not ev.needs_canary     # a fresh worker, after a passing canary
    assert ok.verdict is Verdict.OK, ok.message
    assert all(p.verdict is Verdict.OK and p.n_input_sets >= 10 for p in ok.points)


@pytest.mark.gpu
@gpu
def test_timing_interleaves_and_measures_bandwidth():
    from harness.toolchain.timing import measure_bandwidth, time_interleaved

    bw = measure_bandwidth()
    assert 1e12 < bw < 2e13
    a = torch.randn(1 << 20, device="cuda")
    stats = time_interleaved({"small": lambda i: a[:1024].add_(0), "big": lambda i: a.add_(0)}, n_sets=1,
                             calls_per_graph=20, rounds=3)
    assert stats["big"].median_us > stats["small"].median_us
    # the separator is subtracted: a call that launches nothing costs ~0, not a kernel's time
    nothing = time_interleaved({"nothing": lambda i: None, "small": lambda i: a[:1024].add_(0)}, n_sets=1,
                               calls_per_graph=20, rounds=3)
    assert abs(nothing["nothing"].median_us) < 0.3 < nothing["small"].median_us


@pytest.mark.gpu
@gpu
def test_search_times_a_draft_against_the_promoted_kernel_at_each_static_key(cache_root):
    """The agent loop's evaluate stage times the promoted kernel beside the draft; kda_decode's
    fp32 and bf16 points need the incumbent built for each state dtype (session 23)."""
    from harness.agent.stages import eval_info_from_report, promoted_incumbents
    from harness.promotion import read_manifest
    from harness.toolchain.evaluate import evaluate_candidate

    promoted = next(e["candidate"] for e in read_manifest(REPO) if e["op"] == "kda_decode")
    draft = next(c for c in list_candidates("kda_decode") if c.id != promoted and c.provenance.author == "human"
                 and {"fp32", "bf16"} <= set(c.scope.state_dtypes))
    points = [Point(batch=1, tp=8, state_dtype="fp32"), Point(batch=8, tp=8, state_dtype="bf16")]
    inc = promoted_incumbents(draft, points)
    assert [c.id for c in inc] == [promoted]
    rep = evaluate_candidate(draft, points, archs=list(draft.scope.archs), incumbent=inc, cache_root=cache_root)
    assert rep.verdict is Verdict.OK, (rep.message, rep.worker_log_tail)
    assert rep.incumbent_errors == []
    info = eval_info_from_report(rep, "h200")
    assert info.incumbent == promoted
    assert len(info.timings) == 2
    assert all(t.incumbent_us and t.reference_us and t.kernel_us for t in info.timings)
    # torch.compile writes kda's state outputs into its inputs, in place, as the kernels do
    assert all(t.compiled_us and t.compiled_us < t.reference_us for t in info.timings)


@pytest.mark.gpu
@gpu
def test_search_times_each_point_against_the_promoted_kernel_that_runs_it(cache_root):
    """skinny_gemm holds a narrow promoted kernel for mla_qkv_a beside the broad one (session 35),
    and since session 51 narrow ones at other shapes: one worker loads those that cover the search
    points and times each point against the one a call runs there. The expectation is read from
    the manifest's JSON scopes (the oracle), not from the registry's scope code."""
    from harness.agent.stages import eval_info_from_report, promoted_incumbents
    from harness.promotion import kernel_entries, read_manifest
    from harness.toolchain.evaluate import evaluate_candidate

    manifest = read_manifest(REPO)
    scopes = {e["candidate"]: e["scope"] for e in manifest if e["op"] == "skinny_gemm"}

    def declares(cid: str, p: Point) -> bool:
        s = scopes[cid]
        return p.shape in s["shapes"] and p.tp in s["tp"] and s["batch"][0] <= p.batch <= s["batch"][1]

    order = [k.candidate for k in kernel_entries(manifest)["skinny_gemm"]]     # the order a call tries them
    draft = next(c for c in list_candidates("skinny_gemm") if c.id not in order and c.provenance.author == "human"
                 and set(c.scope.shapes) == {"latent_down", "latent_up", "mla_qkv_a"})
    points = [Point(batch=1, tp=8, shape="mla_qkv_a"), Point(batch=1, tp=8, shape="latent_down")]
    runs_at = [next(cid for cid in order if declares(cid, p)) for p in points]
    assert runs_at[0] != runs_at[1], runs_at                        # the narrow kernel, then the broad one
    covering = [cid for cid in order if any(declares(cid, p) for p in points)]
    inc = promoted_incumbents(draft, points)
    assert [c.id for c in inc] == covering
    rep = evaluate_candidate(draft, points, archs=list(draft.scope.archs), incumbent=inc, cache_root=cache_root,
                             vs_compiled_ref=False)
    assert rep.verdict is Verdict.OK, (rep.message, rep.worker_log_tail)
    assert rep.incumbent_errors == []
    info = eval_info_from_report(rep, "h200")
    assert [(t.shape, t.incumbent_id) for t in info.timings] == list(zip(["mla_qkv_a", "latent_down"], runs_at))
    assert info.incumbent == ",".join(covering)
    assert all(t.incumbent_us and t.kernel_us for t in info.timings)
