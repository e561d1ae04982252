"""The search measures every draft against the op's promoted kernel (the incumbent), not only
against the eager reference: the evaluate stage passes the promoted candidate to the GPU
worker, the records keep the reference's, torch.compile's and the promoted kernel's times
apart, the prompts label each one, and the run summary reports the speedup over the promoted
kernel. Run logs written before that stored the eager reference's time as `incumbent_us`;
they still load, with that time read as the reference's.

The CPU cannot run the GPU worker, so the evaluate stage's GPU result is a test double where
a test says so; everything else is the real code."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.agent.loop import OptimizeConfig, start
from harness.agent.prompting import feedback_prompt
from harness.agent.records import CandidateRecord, EvalInfo, StageStatus, Timing
from harness.agent.stages import ToolchainStages, eval_info_from_report, promoted_incumbents
from harness.hardware import gpu
from harness.opdef import Point
from harness.promotion import read_manifest
from harness.toolchain.candidate import load_candidate

from .conftest import fenced, tiny_kernel
from .llm_server import ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
OP = "moe_router"


def _promoted(op: str) -> str:
    return next(e["candidate"] for e in read_manifest(REPO) if e["op"] == op)


def _other_candidate(op: str, covering: tuple[Point, ...] = ()) -> str:
    """The first candidate folder (by id) that is not the op's first promoted kernel and whose scope
    contains every point of `covering` (narrow candidates, e.g. a TP16-only one, sort anywhere)."""
    promoted = _promoted(op)
    return next(p.name for p in sorted((REPO / "kernels_generated" / op).iterdir())
                if p.is_dir() and p.name != promoted
                and all(load_candidate(op, p.name).scope.contains(pt) for pt in covering))


def _install_promoted(root: Path) -> tuple[str, dict]:
    """Copy the checkout's promoted moe_router folder under `root` and name it in a promoted.json
    there; returns (its id, its candidate.json)."""
    import shutil

    promoted = _promoted(OP)
    kg = root / "kernels_generated"
    shutil.copytree(REPO / "kernels_generated" / OP / promoted, kg / OP / promoted)
    meta = json.loads((kg / OP / promoted / "candidate.json").read_text())
    (kg / "promoted.json").write_text(json.dumps([{"op": OP, "candidate": promoted, "scope": meta["scope"]}]))
    return promoted, meta


# ---- records ---------------------------------------------------------------------------------
def test_old_run_log_timing_reads_its_incumbent_as_the_reference():
    old = {"batch": 8, "tp": 8, "kernel_us": 9.5, "incumbent_us": 90.0, "floor_us": 2.7, "compiled_us": 69.4}
    t = Timing.from_json(old)
    assert (t.reference_us, t.incumbent_us, t.compiled_us) == (90.0, None, 69.4)
    new = Timing(batch=8, tp=8, kernel_us=9.5, incumbent_us=9.8, floor_us=2.7, compiled_us=69.4, reference_us=90.0)
    assert Timing.from_json(json.loads(json.dumps(new.__dict__))) == new


def test_candidate_record_round_trips_the_incumbent_id():
    rec = CandidateRecord(id="abc", round=1, slot=0, author="template",
                          evaluate=EvalInfo(StageStatus.OK, "OK", timings=[Timing(1, 8, 9.0, 10.0, 2.7, 35.0, 55.0)],
                                            incumbent="876e935cf35f"))
    back = CandidateRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert back.evaluate == rec.evaluate and back.evaluate.incumbent == "876e935cf35f"
    assert back.summary() == "OK, geomean 9.00 us, 1.11x the promoted 876e935cf35f"
    back.evaluate.timings[0].incumbent_us = None                 # not timed: no claim
    assert back.summary() == "OK, geomean 9.00 us"


# ---- which kernel is the incumbent ---------------------------------------------------------------
def _ids(cands) -> list[str]:
    return [c.id for c in cands]


def test_promoted_incumbent_is_the_manifest_entry_unless_it_is_the_candidate():
    promoted = _promoted(OP)
    other = load_candidate(OP, _other_candidate(OP))
    pts = [Point(batch=b, tp=8) for b in (1, 8, 64)]
    assert _ids(promoted_incumbents(other, pts)) == [promoted]
    assert promoted_incumbents(load_candidate(OP, promoted), pts) == []      # never timed against itself


def test_promoted_incumbent_none_outside_its_scope_or_without_a_manifest(tmp_path, monkeypatch):
    other = load_candidate(OP, _other_candidate(OP))
    inc_scope = load_candidate(OP, _promoted(OP)).scope
    outside = max(inc_scope.tp) * 2
    assert promoted_incumbents(other, [Point(batch=1, tp=outside)]) == []
    # covering part of the points is enough: the worker times it only there
    assert _ids(promoted_incumbents(other, [Point(batch=1, tp=outside), Point(batch=1, tp=8)])) == [_promoted(OP)]
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))                         # no kernels_generated here
    assert promoted_incumbents(other, [Point(batch=1, tp=8)]) == []


def _skinny_entries() -> tuple[str, str]:
    """(narrow, broad): the checkout's two promoted skinny_gemm kernels, the mla_qkv_a-only one and
    the one of the latent GEMMs and mla_qkv_a (268009), read from the manifest by their scopes."""
    rows = [e for e in read_manifest(REPO) if e["op"] == "skinny_gemm"]
    narrow = next(e["candidate"] for e in rows if e["scope"]["shapes"] == ["mla_qkv_a"])
    broad = next(e["candidate"] for e in rows if {"latent_down", "mla_qkv_a"} <= set(e["scope"]["shapes"]))
    return narrow, broad


def _manifest_covers(op: str, shape: str, tp: int, batch: int) -> bool:
    """Whether some promoted kernel of `op` declares (shape, TP, B) on sm_90a, read from the
    manifest's scopes (since session 51 skinny_gemm holds narrow kernels at more shapes)."""
    for e in read_manifest(REPO):
        s = e["scope"]
        if (e["op"] == op and shape in s["shapes"] and tp in s["tp"] and s["batch"][0] <= batch <= s["batch"][1]
                and "sm_90a" in s["archs"]):
            return True
    return False


def test_each_point_is_timed_against_the_kernel_that_runs_it(monkeypatch):
    """skinny_gemm holds a narrow kernel for mla_qkv_a beside the broad one (session 35): a draft is
    compared with the narrow one at mla_qkv_a and the broad one elsewhere, as perf_sweep compares
    (before session 36 the loop timed the broad one everywhere, ~5% lenient at mla_qkv_a)."""
    import harness.toolchain.evaluate as ev
    from harness.agent.stages import search_points
    from harness.toolchain.sandbox import SandboxResult
    from harness.toolchain.verdict import Verdict

    narrow, broad = _skinny_entries()
    draft = next(c for c in (load_candidate("skinny_gemm", p.name) for p in
                             sorted((REPO / "kernels_generated" / "skinny_gemm").iterdir()) if p.is_dir())
                 if c.id not in (narrow, broad) and {"mla_qkv_a", "latent_down"} <= set(c.scope.shapes))
    pts = search_points(draft, 8)
    incs = promoted_incumbents(draft, pts)
    assert _ids(incs) == [narrow, broad]                          # the order a call tries them
    assert _ids(promoted_incumbents(draft, [p for p in pts if p.shape == "latent_down"])) == [broad]
    assert _ids(promoted_incumbents(load_candidate("skinny_gemm", narrow), pts)) == [broad]

    jobs: list[dict] = []
    monkeypatch.setattr(ev, "run_job", lambda job, *a, **kw: jobs.append(job) or
                        SandboxResult(Verdict.OK, {"points": []}, "ok", 0, None, False, 0.0))
    monkeypatch.setattr(ev, "compile_many", lambda *a, **kw: [])
    rep = ev.evaluate_candidate(draft, pts, incumbent=incs, run_gpu=True, check_static=False)
    assert [i["id"] for i in jobs[0]["incumbents"]] == [narrow, broad]
    assert {(p["shape"], tuple(p["incumbents"])) for p in jobs[0]["points"]} == {
        ("mla_qkv_a", (0, 1))} | {(s, (1,)) for s in draft.scope.shapes if s != "mla_qkv_a"}
    assert rep.incumbent_id == f"{narrow},{broad}"


def test_the_worker_times_the_first_covering_incumbent_that_declares_the_device_arch():
    from harness.toolchain.gpu_eval import pick_incumbent

    incs = [{"id": "narrow", "archs": ["sm_90a"]}, {"id": "broad", "archs": ["sm_90a", "sm_103a"]},
            {"id": "any", "archs": []}]
    assert pick_incumbent(incs, [0, 1], "sm_90a") == 0
    assert pick_incumbent(incs, [0, 1], "sm_103a") == 1          # the narrow one is not built for it
    assert pick_incumbent(incs, [1], "sm_100a") is None          # the reference runs there
    assert pick_incumbent(incs, [0, 2], "sm_100a") == 2
    assert pick_incumbent(incs, [], "sm_90a") is None


def test_evaluate_stage_passes_the_promoted_kernel_to_the_worker(monkeypatch):
    import harness.toolchain.evaluate as ev

    seen: dict = {}

    def fake_evaluate_candidate(cand, points, **kw):       # the GPU worker cannot run here
        seen.update(cand=cand.id, points=[(p.batch, p.tp) for p in points], incumbent=kw.get("incumbent"))
        return SimpleNamespace(op=cand.op, verdict=SimpleNamespace(value="OK"), message="3 points correct",
                               points=[], worker_log_tail="", incumbent_id=None, incumbent_errors=[],
                               arch="sm_90a")

    monkeypatch.setattr(ev, "evaluate_candidate", fake_evaluate_candidate)
    other = load_candidate(OP, _other_candidate(OP))
    info = ToolchainStages(use_gpu=True).evaluate(other)
    assert info.status is StageStatus.OK
    assert seen["points"] == [(1, 8), (8, 8), (64, 8)]
    assert _ids(seen["incumbent"]) == [_promoted(OP)]


# ---- the worker's report -> the loop's record --------------------------------------------------------
def _point(batch: int, stats: dict, incumbent: str = "876e935cf35f", shape: str = "") -> SimpleNamespace:
    return SimpleNamespace(verdict=SimpleNamespace(value="OK"), batch=batch, tp=8, label=f"B{batch}", message="",
                           worst={}, timing_us={k: {"median_us": v} for k, v in stats.items()},
                           incumbent_id=incumbent if "incumbent" in stats else None,
                           point=lambda: Point(batch=batch, tp=8, shape=shape))


def test_eval_info_keeps_reference_compile_and_promoted_times_apart():
    rep = SimpleNamespace(op=OP, verdict=SimpleNamespace(value="OK"), message="2 points correct",
                          worker_log_tail="", incumbent_id="876e935cf35f", incumbent_errors=[],
                          points=[_point(1, {"kernel": 8.8, "reference": 55.2, "compiled_reference": 35.5,
                                             "incumbent": 9.2}),
                                  _point(64, {"kernel": 15.5, "reference": 94.5, "compiled_reference": 69.5,
                                              "incumbent": 16.9})])
    info = eval_info_from_report(rep, "h200")
    assert [(t.batch, t.kernel_us, t.incumbent_us, t.compiled_us, t.reference_us) for t in info.timings] == [
        (1, 8.8, 9.2, 35.5, 55.2), (64, 15.5, 16.9, 69.5, 94.5)]
    assert info.incumbent == "876e935cf35f"
    assert all(t.floor_us and 0 < t.floor_us < t.kernel_us for t in info.timings)


def test_eval_info_without_an_incumbent_and_with_its_build_failures():
    rep = SimpleNamespace(op=OP, verdict=SimpleNamespace(value="OK"), message="1 points correct",
                          worker_log_tail="", incumbent_id="876e935cf35f",
                          incumbent_errors=["B1 TP8: RuntimeError: no bf16 build"],
                          points=[_point(1, {"kernel": 8.8, "reference": 55.2})])
    info = eval_info_from_report(rep, "h200")
    assert info.timings[0].incumbent_us is None and info.timings[0].reference_us == 55.2
    assert info.incumbent is None                              # named only when it was timed
    assert "promoted kernel not timed at B1 TP8: RuntimeError: no bf16 build" in info.detail


def test_eval_info_names_the_kernel_timed_at_each_point():
    rep = SimpleNamespace(op="skinny_gemm", verdict=SimpleNamespace(value="OK"), message="3 points correct",
                          worker_log_tail="", incumbent_id="c8b7a753866a,268009f21621,0123456789ab",
                          incumbent_errors=[],
                          points=[_point(1, {"kernel": 9.0, "incumbent": 9.4}, "c8b7a753866a", "mla_qkv_a"),
                                  _point(1, {"kernel": 14.0, "incumbent": 14.6}, "268009f21621", "latent_down"),
                                  _point(8, {"kernel": 14.1}, "268009f21621", "latent_down")])
    info = eval_info_from_report(rep, "h200")
    assert [(t.shape, t.incumbent_id) for t in info.timings] == [
        ("mla_qkv_a", "c8b7a753866a"), ("latent_down", "268009f21621"), ("latent_down", None)]
    assert info.incumbent == "c8b7a753866a,268009f21621"        # the ones timed, in try order


def test_the_worker_is_told_where_the_incumbent_may_run(monkeypatch):
    """A draft whose scope reaches past the promoted kernel's (here a shape it lacks) is timed
    against it at the shared points only: each point of the worker's job lists the incumbents
    that cover it."""
    import harness.toolchain.evaluate as ev
    from harness.toolchain.sandbox import SandboxResult
    from harness.toolchain.verdict import Verdict

    jobs: list[dict] = []

    def fake_run_job(job, timeout_s, *a, **kw):       # the GPU worker cannot run here
        jobs.append(job)
        return SandboxResult(Verdict.OK, {"points": []}, "ok", 0, None, False, 0.0)

    monkeypatch.setattr(ev, "run_job", fake_run_job)
    monkeypatch.setattr(ev, "compile_many", lambda *a, **kw: [])
    skinny = load_candidate("skinny_gemm", _skinny_entries()[1])
    pts = [Point(batch=1, tp=8, shape=skinny.scope.shapes[0]), Point(batch=1, tp=8, shape="kda_in_proj")]
    assert "kda_in_proj" not in skinny.scope.shapes
    wide = load_candidate("skinny_gemm", _other_candidate("skinny_gemm", covering=tuple(pts)))
    ev.evaluate_candidate(wide, pts, incumbent=skinny, run_gpu=True, check_static=False)
    assert [p["incumbents"] for p in jobs[0]["points"]] == [[0], []]
    assert jobs[0]["incumbents"] == [{"id": skinny.id, "path": str(skinny.kernel_path), "archs": list(skinny.scope.archs)}]
    ev.evaluate_candidate(wide, pts, incumbent=None, run_gpu=True, check_static=False)
    assert [p["incumbents"] for p in jobs[1]["points"]] == [[], []] and jobs[1]["incumbents"] == []


# ---- the worker compiles the incumbent per TP and static key -----------------------------------------
def test_worker_builds_the_incumbent_for_each_static_key(tmp_path, monkeypatch):
    from harness.toolchain import gpu_eval

    kpath = tmp_path / "kernel.py"
    kpath.write_text("def compile(tp, options, **static):\n    return ('built', tp, options, tuple(sorted(static.items())))\n"
                     "def launch(compiled, **tensors):\n    pass\n")
    monkeypatch.delitem(sys.modules, "incumbent_kernel_0", raising=False)
    job = {"options": "--opt"}
    _, fp32 = gpu_eval._load_incumbent(str(kpath), 0, job, Point(batch=1, tp=8), {})
    _, bf16 = gpu_eval._load_incumbent(str(kpath), 0, job, Point(batch=1, tp=16), {"state_dtype": "bf16"})
    assert fp32 == ("built", 8, "--opt", ())
    assert bf16 == ("built", 16, "--opt", (("state_dtype", "bf16"),))
    monkeypatch.delitem(sys.modules, "incumbent_kernel_0", raising=False)


def test_worker_keeps_each_incumbent_in_a_module_of_its_own(tmp_path, monkeypatch):
    """Two promoted kernels of one op (a narrow one beside a broad one) are both loaded in one
    worker: each under its own module name, so neither's compile runs the other's code."""
    from harness.toolchain import gpu_eval

    paths = []
    for tag in ("narrow", "broad"):
        (tmp_path / tag).mkdir()
        kp = tmp_path / tag / "kernel.py"
        kp.write_text(f"def compile(tp, options, **static):\n    return '{tag}'\ndef launch(compiled, **tensors):\n    pass\n")
        paths.append(str(kp))
    for i in (0, 1):
        monkeypatch.delitem(sys.modules, f"incumbent_kernel_{i}", raising=False)
    built = [gpu_eval._load_incumbent(p, i, {"options": ""}, Point(batch=1, tp=8), {})[1] for i, p in enumerate(paths)]
    assert built == ["narrow", "broad"]
    assert gpu_eval._load_incumbent(paths[0], 0, {"options": ""}, Point(batch=8, tp=8), {})[1] == "narrow"
    for i in (0, 1):
        monkeypatch.delitem(sys.modules, f"incumbent_kernel_{i}", raising=False)


# ---- prompts and summary ----------------------------------------------------------------------------
def test_feedback_labels_each_time():
    rec = CandidateRecord(id="d1", round=1, slot=0, author="llm",
                          evaluate=EvalInfo(StageStatus.OK, "OK", timings=[Timing(1, 8, 8.8, 9.2, 2.68, 35.5, 55.2)],
                                            incumbent="876e935cf35f"))
    text = feedback_prompt(rec, gpu("h200"))
    assert "the incumbent (promoted kernel 876e935cf35f) 9.20 us (1.05x)" in text
    assert "torch.compile 35.50 us" in text and "eager reference 55.20 us" in text
    assert "incumbent 55.20" not in text


class TimedStages(ToolchainStages):
    """Real static and compile stages; evaluate returns what the GPU worker would (test double:
    no CUDA GPU here) - the draft 8.8 / 15.5 us, the promoted kernel 9.2 / 16.9 us."""

    def __init__(self) -> None:
        super().__init__(use_gpu=False)

    def evaluate(self, cand) -> EvalInfo:
        return EvalInfo(StageStatus.OK, "OK", "timed on paper (test double)", incumbent="876e935cf35f",
                        timings=[Timing(1, 8, 8.8, 9.2, 2.68, 35.5, 55.2), Timing(64, 8, 15.5, 16.9, 2.87, 69.5, 94.5)])


def test_run_reports_speedup_over_the_promoted_kernel_and_prompts_it(harness_root):
    script = [("reply", fenced(tiny_kernel())), ("reply", fenced("# faster\n" + tiny_kernel()))]
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=2, candidates_per_round=1, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, run_gates=False)
    with ScriptedLLM(script) as srv:
        cfg.base_url = srv.url + "/v1"
        opt = start(cfg, run_id="t-incumbent", stages=TimedStages())
        opt.run()
    round2 = "\n".join(m["content"] for m in srv.requests[1]["body"]["messages"])
    assert "the incumbent (the promoted kernel, measured in this run) 9.20 us: beat it" in round2
    assert "the incumbent (promoted kernel 876e935cf35f) 16.90 us (1.09x)" in round2
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    sp = summary["speedup"]
    assert sp["promoted"] == "876e935cf35f"
    assert sp["vs_promoted_geomean"] == pytest.approx(((9.2 / 8.8) * (16.9 / 15.5)) ** 0.5)
    assert sp["vs_reference_geomean"] == pytest.approx(((55.2 / 8.8) * (94.5 / 15.5)) ** 0.5)
    assert sp["vs_torch_compile_geomean"] == pytest.approx(((35.5 / 8.8) * (69.5 / 15.5)) ** 0.5)


class SlowerStages(ToolchainStages):
    """As TimedStages, but the draft is slower than the promoted kernel at every point."""

    def __init__(self, times: list[tuple[int, float, float]]) -> None:
        super().__init__(use_gpu=False)
        self.times = times

    def evaluate(self, cand) -> EvalInfo:
        return EvalInfo(StageStatus.OK, "OK", "timed on paper (test double)", incumbent="876e935cf35f",
                        timings=[Timing(b, 8, k, inc, 2.7, 35.0, 55.0) for b, k, inc in self.times])


def _run_one_draft(monkeypatch, stages: ToolchainStages, run_id: str, promote: bool = False) -> tuple[dict, list[str]]:
    """One round of one scripted draft through the real loop, `stages` standing in for the GPU;
    the full gates are a test double that records which candidate they were asked to gate (the real
    gates need the repo's git base; the loop's choice is under test). Returns (summary, gated ids)."""
    import harness.agent.gating as gating

    gated_ids: list[str] = []

    def fake_gates(op, cid, *a, **kw):
        gated_ids.append(cid)
        return {"candidate": cid, "passed": False, "verdicts": {"perf_sweep": "FAIL"}}

    monkeypatch.setattr(gating, "run_full_gates", fake_gates)
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=1, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, promote=promote)
    with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
        cfg.base_url = srv.url + "/v1"
        opt = start(cfg, run_id=run_id, stages=stages)
        opt.run()
    return json.loads((opt.log.folder / "summary.json").read_text()), gated_ids


@pytest.mark.parametrize("times, gated, why", [
    ([(1, 9.5, 9.2), (64, 17.5, 16.9)], False, "slower than the promoted 876e935cf35f at every search point"),
    ([(1, 9.1, 9.2), (64, 17.5, 16.9)], False, "0.988x the promoted 876e935cf35f at the search points (geomean), "
                                               "below the perf gate's 1.05"),
    ([(1, 9.0, 9.2), (64, 16.6, 16.9)], False, "1.020x the promoted"),       # faster everywhere, within drift
    ([(1, 8.0, 9.2), (64, 15.5, 16.9)], True, ""),                          # 1.12x: worth the gates
])
def test_gates_skipped_when_below_the_perf_bar_over_the_promoted_kernel(harness_root, monkeypatch, times, gated, why):
    """Session 24 on the H200: the loop gated a draft 1.007x the promoted router, and the gates ran
    for minutes although the perf gate wants 1.05 (gate_config perf_sweep.geomean_margin)."""
    summary, gated_ids = _run_one_draft(monkeypatch, SlowerStages(times), "t-slower", promote=not gated)
    assert bool(gated_ids) is gated
    if not gated:
        assert summary["gates"]["ran"] is False
        assert why in summary["gates"]["reason"]
        assert "gate it anyway: harness gate moe_router" in summary["gates"]["reason"]
        assert summary["promoted"]["ok"] is False


# ---- the search's points cover the scope's static keys ---------------------------------------------
def test_search_points_cover_state_dtypes_and_shapes_at_a_tp_in_scope():
    import dataclasses

    from harness.agent.stages import search_points

    kda = load_candidate("kda_decode", _promoted("kda_decode"))
    pts = search_points(kda, 8)
    assert [(p.batch, p.tp, p.state_dtype) for p in pts] == [
        (1, 8, "fp32"), (1, 8, "bf16"), (8, 8, "fp32"), (8, 8, "bf16"), (64, 8, "fp32"), (64, 8, "bf16")]
    skinny = load_candidate("skinny_gemm", _promoted("skinny_gemm"))     # scope B 1..8, three shapes
    assert {(p.batch, p.shape) for p in search_points(skinny, 8)} == {
        (b, s) for b in (1, 8) for s in skinny.scope.shapes}
    tp16_only = dataclasses.replace(kda, scope=dataclasses.replace(kda.scope, tp=(16,)))
    assert {p.tp for p in search_points(tp16_only, 8)} == {16}
    # the promoted skinny kernels cover their own shapes, not another one
    narrow, broad = _skinny_entries()
    other = next(c for c in (load_candidate("skinny_gemm", p.name) for p in
                             sorted((REPO / "kernels_generated" / "skinny_gemm").iterdir()) if p.is_dir())
                 if c.id not in (narrow, broad))
    assert _ids(promoted_incumbents(other, search_points(load_candidate("skinny_gemm", broad), 8))) == [narrow, broad]
    import reference_impls

    shapes = reference_impls.get("skinny_gemm").extra["shape_names"]
    bare = next(s for s in shapes if not _manifest_covers("skinny_gemm", s, 8, 1))
    assert promoted_incumbents(other, [Point(batch=1, tp=8, shape=bare)]) == []     # (kda_in_proj was, until session 52)


def test_feedback_names_the_kernel_timed_at_each_point():
    """skinny_gemm: the narrow kernel runs mla_qkv_a, the broad one the latent GEMMs; each line of the
    feedback names the one its incumbent time is from."""
    rec = CandidateRecord(id="d3", round=1, slot=0, author="llm",
                          evaluate=EvalInfo(StageStatus.OK, "OK", incumbent="c8b7a753866a,268009f21621", timings=[
                              Timing(1, 8, 9.3, 9.26, 7.2, 46.0, 65.0, shape="mla_qkv_a", incumbent_id="c8b7a753866a"),
                              Timing(1, 8, 14.1, 14.06, 12.2, 69.0, 106.0, shape="latent_down",
                                     incumbent_id="268009f21621")]))
    text = feedback_prompt(rec, gpu("h200"))
    assert "- B=1 mla_qkv_a: 9.30 us; the incumbent (promoted kernel c8b7a753866a) 9.26 us" in text
    assert "- B=1 latent_down: 14.10 us; the incumbent (promoted kernel 268009f21621) 14.06 us" in text


def test_feedback_names_the_static_key_of_each_point():
    rec = CandidateRecord(id="d2", round=1, slot=0, author="llm",
                          evaluate=EvalInfo(StageStatus.OK, "OK", timings=[
                              Timing(8, 8, 5.0, 5.5, 2.0, 20.0, 60.0),
                              Timing(8, 8, 4.0, 4.4, 1.5, 18.0, 50.0, state_dtype="bf16")]))
    text = feedback_prompt(rec, gpu("h200"))
    assert "- B=8: 5.00 us" in text and "- B=8 bf16: 4.00 us" in text
    assert Timing(1, 8, 9.0, shape="mla_qkv_a").label() == "B=1 mla_qkv_a"


def test_compile_stage_builds_a_tp16_only_candidate_at_tp16(monkeypatch):
    import dataclasses

    import harness.toolchain.compile as comp

    seen: list[int] = []

    def fake_compile(cand, arch, tp, static, **kw):     # records the TP; the real compile is tested elsewhere
        seen.append(tp)
        return SimpleNamespace(ok=True, max_registers=64, spill_bytes=0, global_loads_by_bits={}, compile_s=0.1,
                               cache_hit=True)

    monkeypatch.setattr(comp, "compile_candidate", fake_compile)
    kda = load_candidate("kda_decode", _promoted("kda_decode"))
    stages = ToolchainStages(use_gpu=False)
    stages.compile(dataclasses.replace(kda, scope=dataclasses.replace(kda.scope, tp=(16,))), "sm_90a")
    stages.compile(kda, "sm_90a")
    assert seen == [16, 8]


# ---- the template search starts around the promoted kernel -------------------------------------------
def test_template_search_starts_around_the_promoted_render(tmp_path, monkeypatch):
    from harness import paths
    from harness.agent.families import load_families
    from harness.agent.loop import promoted_proposal

    fams = load_families(OP, paths.prompts_dir())
    promoted = _promoted(OP)
    prop, cid = promoted_proposal(OP, fams)
    meta = json.loads((REPO / "kernels_generated" / OP / promoted / "candidate.json").read_text())
    assert cid == promoted and prop.family == meta["provenance"]["template"]["family"]
    # the provenance's params, plus the family's defaults for knobs added since (which render the same)
    recorded = meta["provenance"]["template"]["params"]
    fam = next(f for f in fams if f.name == prop.family)
    assert {k: v for k, v in prop.params.items() if k in recorded} == recorded
    assert all(fam.default[k] == v for k, v in prop.params.items() if k not in recorded)
    assert fam.render(prop.params) == (REPO / "kernels_generated" / OP / promoted / "kernel.py").read_text()
    # a promoted kernel written whole (no template provenance), or none at all: no starting point
    root = tmp_path / "root"
    _, meta = _install_promoted(root)
    meta["provenance"]["template"] = None
    (root / "kernels_generated" / OP / promoted / "candidate.json").write_text(json.dumps(meta))
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    assert promoted_proposal(OP, fams) is None
    (root / "kernels_generated" / "promoted.json").write_text("[]")
    assert promoted_proposal(OP, fams) is None


def test_optimize_logs_the_first_round_around_the_promoted_kernel(harness_root):
    import shutil

    from harness.agent.families import params_key

    promoted, meta = _install_promoted(harness_root)
    for sub in (OP, "_shared"):
        shutil.copytree(REPO / "prompts" / "kernels" / sub, harness_root / "prompts" / "kernels" / sub)
    cfg = OptimizeConfig(op=OP, agent="template", rounds=1, candidates_per_round=3, archs=["sm_90a"],
                         compile_workers=1, run_gates=False)
    opt = start(cfg, run_id="t-around", stages=ToolchainStages(use_gpu=False))
    drafts = opt._drafts(1)                                   # renders only; nothing compiles here
    ev = [json.loads(x) for x in (opt.log.folder / "events.jsonl").read_text().splitlines()]
    prop_ev = next(e for e in ev if e["kind"] == "proposals")
    assert prop_ev["data"]["around"] == promoted
    tpl = meta["provenance"]["template"]
    known = params_key(tpl["family"], tpl["params"])
    got = [params_key(d.template["family"], d.template["params"]) for d in drafts]
    assert len(got) == 3 and known not in got
    assert [d.template["family"] for d in drafts[:2]] == [tpl["family"]] * 2    # its neighbours first
    from harness.dashboard.runs import read_run

    assert any(f"round 1: 3 configurations (around the promoted {promoted})" == e.text
               for e in read_run(opt.log.folder).events)


def test_first_llm_draft_prompt_shows_the_promoted_kernel(harness_root):
    promoted, _ = _install_promoted(harness_root)
    source = (harness_root / "kernels_generated" / OP / promoted / "kernel.py").read_text()
    script = [("reply", fenced(tiny_kernel())), ("reply", fenced("# again\n" + tiny_kernel()))]
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=2, candidates_per_round=1, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, run_gates=False)
    with ScriptedLLM(script) as srv:
        cfg.base_url = srv.url + "/v1"
        start(cfg, run_id="t-prod", stages=ToolchainStages(use_gpu=False)).run()
    first = srv.requests[0]["body"]["messages"][-1]["content"]
    assert f"## The kernel in production (`{promoted}`, promoted through the gates)" in first
    assert source.strip() in first and "No verified kernel exists yet" not in first
    second = next(m["content"] for m in srv.requests[1]["body"]["messages"]     # round 2 has a best of its own
                  if m["role"] == "user" and "## Target" in m["content"])
    assert "The kernel in production" not in second and "## Current best kernel" in second


# ---- the worker's timing groups -----------------------------------------------------------------------
def test_the_kernels_are_timed_apart_from_the_references():
    """Session 36's A/A probe: with the eager reference inside the kernels' interleave, one kernel.py
    loaded twice read 0.977-1.025 against itself (by order), 0.999-1.000 without it. The worker's
    first group holds the kernels only, the second the references."""
    from harness.toolchain.gpu_eval import timing_groups

    k, i, r, c = (lambda n: None), (lambda n: None), (lambda n: None), (lambda n: None)
    assert [list(g) for g in timing_groups(k, i, r, c)] == [["kernel", "incumbent"], ["reference", "compiled_reference"]]
    assert [list(g) for g in timing_groups(k, None, r, None)] == [["kernel"], ["reference"]]
    groups = timing_groups(k, i, r, c)
    assert groups[0]["kernel"] is k and groups[0]["incumbent"] is i and groups[1]["reference"] is r


# ---- points no promoted kernel covers: the reference runs them today ------------------------------------
def test_eval_info_marks_the_points_a_promoted_kernel_covers():
    """A skinny_gemm draft over latent_down (a promoted kernel's shape) and mla_q_b (none covers it,
    so cuBLAS, the reference, runs it today): each timing says which, and the draft is held to the
    promoted kernel at the first and to the reference at the second, as perf_sweep holds it."""
    from harness.agent.stages import covered_points

    narrow, broad = _skinny_entries()
    incs = [load_candidate("skinny_gemm", narrow), load_candidate("skinny_gemm", broad)]
    pts = [Point(batch=1, tp=8, shape="latent_down"), Point(batch=1, tp=8, shape="mla_q_b")]
    assert covered_points(incs, pts) == {pts[0]}
    rep = SimpleNamespace(op="skinny_gemm", verdict=SimpleNamespace(value="OK"), message="2 points correct",
                          worker_log_tail="", incumbent_id=f"{narrow},{broad}", incumbent_errors=[],
                          points=[_point(1, {"kernel": 14.0, "incumbent": 14.6, "reference": 17.0}, broad, "latent_down"),
                                  _point(1, {"kernel": 5.0, "reference": 8.0}, broad, "mla_q_b")])
    info = eval_info_from_report(rep, "h200", covered_points(incs, pts))
    assert [(t.shape, t.covered, t.today_us) for t in info.timings] == [("latent_down", True, 14.6), ("mla_q_b", False, 8.0)]
    assert info.vs_promoted() is None                           # the promoted kernel was not timed everywhere
    assert info.vs_today() == pytest.approx(((14.6 / 14.0) * (8.0 / 5.0)) ** 0.5)
    assert info.today_label() == (f"what runs each point today (the promoted {broad} at 1 of 2 search points, "
                                  "the reference at the rest)")
    assert eval_info_from_report(rep, "h200").timings[1].covered is None        # not told: unknown
    rec = CandidateRecord(id="d4", round=1, slot=0, author="llm", evaluate=info)
    text = feedback_prompt(rec, gpu("h200"))
    assert "B=1 mla_q_b: 5.00 us; no promoted kernel covers this point, so the eager reference runs it" in text


def test_a_promoted_kernel_not_built_for_the_device_leaves_its_points_to_the_reference():
    """The registry calls a kernel only on an arch its scope declares, and the GPU worker times it
    only there (gpu_eval.pick_incumbent): on an H200 (sm_90a) a kernel scoped to sm_103a alone
    covers nothing, so the reference is today's path there. Before session 49 covered_points went
    by scope alone, and such a point had no time of today's path at all."""
    from dataclasses import replace

    from harness.agent.stages import covered_points

    _, broad = _skinny_entries()
    inc = load_candidate("skinny_gemm", broad)
    only_103 = SimpleNamespace(scope=replace(inc.scope, archs=("sm_103a",)))
    pts = [Point(batch=1, tp=8, shape="latent_down"), Point(batch=1, tp=8, shape="mla_q_b")]
    assert covered_points([only_103], pts, "sm_90a") == set()
    assert covered_points([only_103], pts, "sm_103a") == {pts[0]}          # mla_q_b is outside its shapes
    assert covered_points([only_103], pts) == {pts[0]}                     # arch unknown: scope alone
    assert covered_points([inc, only_103], pts, "sm_90a") == {pts[0]}


def test_evaluate_stage_tells_which_points_a_promoted_kernel_covers(monkeypatch):
    import harness.toolchain.evaluate as ev

    def fake_evaluate_candidate(cand, points, **kw):       # the GPU worker cannot run here
        covered_inc = {p for p in points if any(i.scope.contains(p) for i in kw["incumbent"])}
        pts = [SimpleNamespace(verdict=SimpleNamespace(value="OK"), batch=p.batch, tp=p.tp, label=p.label(), message="",
                               worst={}, timing_us={"kernel": {"median_us": 5.0}, "reference": {"median_us": 8.0},
                                                    **({"incumbent": {"median_us": 6.0}} if p in covered_inc else {})},
                               incumbent_id="x" if p in covered_inc else None, point=lambda p=p: p)
               for p in points]
        return SimpleNamespace(op=cand.op, verdict=SimpleNamespace(value="OK"), message="", points=pts,
                               worker_log_tail="", incumbent_id="x", incumbent_errors=[], arch="sm_90a")

    monkeypatch.setattr(ev, "evaluate_candidate", fake_evaluate_candidate)
    narrow, broad = _skinny_entries()
    draft = next(c for c in (load_candidate("skinny_gemm", p.name) for p in
                             sorted((REPO / "kernels_generated" / "skinny_gemm").iterdir()) if p.is_dir())
                 if c.id not in (narrow, broad) and "kda_in_proj" in c.scope.shapes and "latent_down" in c.scope.shapes)
    info = ToolchainStages(use_gpu=True).evaluate(draft)
    by_shape = {(t.shape, t.covered) for t in info.timings}
    assert ("latent_down", True) in by_shape and any(not covered for _, covered in by_shape)
    assert all(t.covered is _manifest_covers("skinny_gemm", t.shape, t.tp, t.batch) for t in info.timings)
    assert all(t.today_us == (6.0 if t.covered else 8.0) for t in info.timings)


class TodayStages(ToolchainStages):
    """Evaluate returns what the GPU worker would (test double): a draft timed at two shapes, one a
    promoted kernel covers (latent_down) and one it does not (mla_q_b, where the reference runs)."""

    def __init__(self, times: list[tuple[str, int, float, float | None, float, bool]]) -> None:
        super().__init__(use_gpu=False)
        self.times = times

    def evaluate(self, cand) -> EvalInfo:
        return EvalInfo(StageStatus.OK, "OK", "timed on paper (test double)", incumbent="268009f21621",
                        timings=[Timing(b, 8, k, inc, 2.7, None, ref, shape=sh, covered=cov,
                                        incumbent_id="268009f21621" if cov else None)
                                 for sh, b, k, inc, ref, cov in self.times])


@pytest.mark.parametrize("times, gated, why, hint", [
    # the reference runs every point today and the draft is slower there: the gates would refuse it
    ([("mla_q_b", 1, 9.0, None, 8.0, False), ("mla_q_b", 64, 20.0, None, 18.0, False)], False,
     "slower than the reference (no promoted kernel covers these points) at every search point", None),
    # 1.2x the reference at mla_q_b, 0.8x the promoted kernel at latent_down: gate mla_q_b alone
    ([("mla_q_b", 1, 5.0, None, 6.0, False), ("latent_down", 1, 10.0, 8.0, 12.0, True)], False,
     "at the search points (geomean), below the perf gate's 1.05", "--shapes mla_q_b"),
    # 1.5x the reference and 1.1x the promoted kernel: worth the gates
    ([("mla_q_b", 1, 4.0, None, 6.0, False), ("latent_down", 1, 10.0, 11.0, 12.0, True)], True, "", None),
])
def test_the_loop_holds_a_draft_to_the_reference_where_no_promoted_kernel_runs(harness_root, monkeypatch, capsys,
                                                                              times, gated, why, hint):
    """Before session 48 a draft whose points a promoted kernel covers only in part had no speedup
    over what it would replace (vs_promoted needs every point), so the loop gated it blind and gave
    no narrowing hint: a skinny_gemm draft over all 13 GEMM shapes, three of which have kernels."""
    summary, gated_ids = _run_one_draft(monkeypatch, TodayStages(times), "t-today")
    assert bool(gated_ids) is gated
    sp = summary["speedup"]
    ts = [(inc if cov else ref) / k for _, _, k, inc, ref, cov in times]
    assert sp["vs_today_geomean"] == pytest.approx((ts[0] * ts[1]) ** 0.5)
    assert sp["vs_promoted_geomean"] is None
    if not gated:
        assert why in summary["gates"]["reason"]
    if hint:
        assert sp["narrow_hint"]["command"].endswith(hint) and "gate that part with `harness narrow" in summary["gates"]["reason"]
    else:
        assert sp["narrow_hint"] is None
    from harness.agent.display import print_summary

    capsys.readouterr()
    print_summary(summary)                                       # what a person reads at the end
    shown = " ".join(capsys.readouterr().out.split())
    assert f"{sp['vs_today_geomean']:.2f}x vs {sp['today']}" in shown


def test_the_drafting_prompt_names_the_reference_where_it_is_the_incumbent(harness_root):
    """A point no promoted kernel covers: the next round's target table shows the reference's time
    as the time to beat, and says it is the reference, not a promoted kernel."""
    script = [("reply", fenced(tiny_kernel())), ("reply", fenced("# faster\n" + tiny_kernel()))]
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=2, candidates_per_round=1, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, run_gates=False)
    with ScriptedLLM(script) as srv:
        cfg.base_url = srv.url + "/v1"
        opt = start(cfg, run_id="t-today-prompt", stages=TodayStages([("", 1, 5.0, None, 6.0, False),
                                                                      ("", 64, 9.0, None, 12.0, False)]))
        opt.run()
    round2 = "\n".join(m["content"] for m in srv.requests[1]["body"]["messages"])
    assert ("the incumbent (the eager reference, which runs this point today: no promoted kernel covers it, "
            "measured in this run) 6.00 us: beat it") in round2
    assert "the incumbent (the promoted kernel" not in round2


def test_the_target_table_computes_its_floor_at_the_incumbents_gemm_shape():
    """Before session 49 a row's floor was at the op's default shape (skinny_gemm: latent_down) while
    its time to beat came from the first shape the search timed, so a row could pair latent_down's
    bytes with mla_q_b's time. Now both are of the shape the incumbent was timed at, and the row
    names it; a batch with no incumbent keeps the default shape."""
    import reference_impls
    from harness.agent.prompting import draft_prompt
    from harness.agent.state import Incumbent

    defn = reference_impls.get("skinny_gemm")
    text = draft_prompt(defn, gpu("h200"), 8, None, None, [],
                        incumbents={1: Incumbent(6.0, True, shape="mla_q_b")})
    k, n = 1536, (96 // 8) * (128 + 64)                           # mla_q_b at TP8: q_lora -> h*192
    mb = (k * n + k + n) * 2 / 1e6                                # bf16 weight, x and out at B=1
    row1 = next(line for line in text.splitlines() if line.startswith("- B=1 "))
    assert row1.startswith(f"- B=1 (mla_q_b): {mb:.2f} MB moved at least")
    assert "the eager reference, which runs this point today" in row1 and "6.00 us: beat it" in row1
    k, n = 7168, defn.extra["shapes"][8]["latent_down"][1]        # B=8 has no incumbent: the default
    row8 = next(line for line in text.splitlines() if line.startswith("- B=8"))
    assert row8.startswith(f"- B=8: {(k * n + 8 * k + 8 * n) * 2 / 1e6:.2f} MB moved at least")
    assert "beat it" not in row8


def test_incumbent_times_name_the_key_they_were_timed_at(harness_root):
    """RunState.incumbent_times keeps, per batch, the first static key an evaluation timed, and says
    which it is and whether the reference runs it."""
    from harness.agent.records import CandidateRecord
    from harness.agent.state import Incumbent, RunState

    st = RunState()
    rec = CandidateRecord(id="c1", round=1, slot=0, author="test")
    rec.evaluate = EvalInfo(StageStatus.OK, "OK", "", timings=[
        Timing(1, 8, 5.0, None, 2.7, None, 6.0, shape="mla_q_b", covered=False),
        Timing(1, 8, 9.0, 8.0, 2.7, None, 12.0, shape="latent_down", covered=True),
        Timing(8, 8, 7.0, None, 3.1, None, 7.5, shape="mla_q_b", covered=False)])
    st.records["c1"] = rec
    assert st.incumbent_times() == {1: Incumbent(6.0, True, "mla_q_b"), 8: Incumbent(7.5, True, "mla_q_b")}
