"""The end of `harness optimize` on the real gates: the best GPU-verified candidate goes
through gating.run_full_gates (gates/suite.py), its evidence record is written, the GATES
event and summary.json name what did not pass, and --promote refuses.

The CPU cannot verify a candidate on a GPU, so one thing is a test double: the evaluate
stage's result (VerifiedOnPaperStages). Drafting (scripted LLM server), static checks,
compiles, scoring, the gates, the evidence write and promotion are the real code, in a
throwaway git repository (HARNESS_ROOT) holding a copy of the tree."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gates import CPU_GATES, GPU_GATES
from harness.agent.loop import OptimizeConfig, start
from harness.agent.records import EvalInfo, StageStatus, Timing
from harness.agent.runlog import EventKind, RunLog
from harness.agent.stages import ToolchainStages

from .conftest import fenced, tiny_kernel
from .llm_server import ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REPO = Path(__file__).resolve().parents[2]
OP = "moe_router"


class VerifiedOnPaperStages(ToolchainStages):
    """The real static and compile stages; evaluate claims a GPU verification the CPU cannot
    make (the only double here: no CUDA GPU on this machine)."""

    def __init__(self) -> None:
        super().__init__(use_gpu=False)
        self.evaluated: list[str] = []

    def evaluate(self, cand) -> EvalInfo:
        self.evaluated.append(cand.id)
        return EvalInfo(StageStatus.OK, "OK", "verified on paper (test double)",
                        timings=[Timing(batch=1, tp=8, kernel_us=5.0, incumbent_us=10.0)])


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def project(tmp_path, monkeypatch, compile_cache) -> Path:
    """A git repo with the gates, harness and references committed, runs/ ignored as in the
    checkout, and an empty promoted manifest."""
    root = tmp_path / "repo"
    root.mkdir()
    for d in ("gates", "harness", "reference_impls"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    (root / "kernels_generated").mkdir()
    (root / "kernels_generated" / "promoted.json").write_text("[]\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "test")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    monkeypatch.setenv("HARNESS_CACHE", str(compile_cache))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-0123456789abcdefghijklmnop")
    monkeypatch.delenv("HARNESS_GATE_BASE", raising=False)
    return root


def test_verified_candidate_goes_through_real_gates_and_is_not_promoted(project):
    import harness.agent.gating as gating

    calls: list[tuple[str, str]] = []
    real_run_full_gates = gating.run_full_gates

    def spy(op: str, cid: str, *a, **kw):          # records the call, runs the real gates
        calls.append((op, cid))
        return real_run_full_gates(op, cid, *a, **kw)

    manifest_before = (project / "kernels_generated" / "promoted.json").read_bytes()
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=1, archs=["sm_90a"],
                         promote=True, retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1)
    stages = VerifiedOnPaperStages()
    mp = pytest.MonkeyPatch()
    mp.setattr(gating, "run_full_gates", spy)
    try:
        with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
            cfg.base_url = srv.url + "/v1"
            opt = start(cfg, run_id="t-gates", stages=stages)
            st = opt.run()
    finally:
        mp.undo()

    # the candidate compiled for real and was "verified": it is the one gated
    (cid,) = st.records
    assert st.records[cid].compiled_everywhere and stages.evaluated == [cid]
    assert calls == [(OP, cid)]

    # the evidence record under the candidate's folder: CPU gates ran, GPU gates NOT_RUN
    ev_dir = project / "kernels_generated" / OP / cid / "evidence"
    records = sorted(ev_dir.glob("*.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    assert rec["op"] == OP and rec["candidate_id"] == cid
    rec_verdicts = {g["gate"]: g["verdict"] for g in rec["gates"]}
    assert set(rec_verdicts) == {g.value for g in CPU_GATES} | {g.value for g in GPU_GATES}
    for g in CPU_GATES:
        assert rec_verdicts[g.value] in ("pass", "fail", "error"), (g, rec_verdicts)
    # the candidate only added its own folder and passes the code policy
    assert rec_verdicts["isolation"] == "pass" and rec_verdicts["static"] == "pass", rec["gates"]
    not_run = sorted(g.value for g in GPU_GATES)
    assert sorted(g for g, v in rec_verdicts.items() if v == "not_run") == not_run

    # the GATES event and summary.json say the same, not passed, NOT_RUN gates named
    log = RunLog.open(project / "runs", "t-gates")
    (gev,) = [e for e in log.events if e.kind is EventKind.GATES]
    assert gev.data["ran"] is True and gev.data["candidate"] == cid and gev.data["passed"] is False
    assert gev.data["verdicts"] == rec_verdicts
    assert Path(gev.data["evidence"]).resolve() == records[0].resolve()
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    g = summary["gates"]
    assert g["passed"] is False and g["verdicts"] == rec_verdicts
    assert sorted(k for k, v in g["verdicts"].items() if v == "not_run") == not_run
    assert all("CUDA GPU" in g["reasons"][k][0] for k in not_run)   # the real K3 config, not the tiny smoke

    # --promote: refused by harness.promotion, recorded; nothing promoted
    p = summary["promoted"]
    assert p is not None and p["ok"] is False and p["candidate"] == cid and "refusing to promote" in p["reason"]
    assert (project / "kernels_generated" / "promoted.json").read_bytes() == manifest_before
    assert _git(project, "branch", "--list", "promote/*") == ""
    assert _git(project, "rev-list", "--count", "--all") == "1"


class GpuVerifiedOnPaperStages(VerifiedOnPaperStages):
    """VerifiedOnPaperStages on a machine that says it has a GPU (the loop's own view only: the
    gates still find none and report their GPU gates NOT_RUN)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__()
        self.has_gpu = True


def test_a_refused_promote_on_a_gpu_machine_exits_1_with_the_reason(project, run_cli, monkeypatch):
    """`harness optimize --promote` exited 0 when the promotion was refused. On a machine with a
    GPU (the gates ran and did not pass, harness.promotion refused) it exits 1, as a failed
    `harness gate`, with the reason on stderr; --json still prints the whole summary."""
    import harness.agent.loop as loop

    monkeypatch.setattr(loop, "ToolchainStages", GpuVerifiedOnPaperStages)
    manifest_before = (project / "kernels_generated" / "promoted.json").read_bytes()
    with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
        code, out, err = run_cli(["optimize", "--op", OP, "--agent", "openai:gpt-4o", "--base-url", srv.url + "/v1",
                                  "--rounds", "1", "--candidates-per-round", "1", "--promote", "--json"])
    assert code == 1 and "Traceback" not in out + err, err
    s = json.loads(out)
    assert s["gpu_available"] is True and s["gates"]["ran"] is True and s["gates"]["passed"] is False
    p = s["promoted"]
    assert p["ok"] is False and p["reason"].startswith(f"refusing to promote {OP}/{s['best']['id']}: ")
    assert err.splitlines()[-1] == f"harness: error: --promote refused: {p['reason']}"
    assert (project / "kernels_generated" / "promoted.json").read_bytes() == manifest_before


def test_promote_without_a_verified_candidate_is_refused_and_recorded(project):
    """No double: on the CPU nothing is GPU-verified, the gates do not run, --promote says why."""
    manifest_before = (project / "kernels_generated" / "promoted.json").read_bytes()
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=1, archs=["sm_90a"],
                         promote=True, retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1)
    with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
        cfg.base_url = srv.url + "/v1"
        opt = start(cfg, run_id="t-nogates", stages=ToolchainStages(use_gpu=False))
        opt.run()
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    assert summary["gates"]["ran"] is False and summary["gates"]["candidate"] is None
    p = summary["promoted"]
    assert p["ok"] is False and p["reason"].startswith("gates not run: ") and "GPU" in p["reason"]
    (cid,) = opt.state.records
    assert not (project / "kernels_generated" / OP / cid / "evidence").exists()
    assert (project / "kernels_generated" / "promoted.json").read_bytes() == manifest_before
    assert _git(project, "branch", "--list", "promote/*") == ""


class SlowVerifiedStages(VerifiedOnPaperStages):
    """Verification that outlasts the run's --time-limit."""

    def evaluate(self, cand) -> EvalInfo:
        import time

        time.sleep(1.2)
        return super().evaluate(cand)


def test_gates_are_not_started_past_the_time_limit(project):
    """--time-limit stops new work: the full gates (minutes on a GPU) are not started once it
    has passed; the GATES event and --promote say why and how to gate later."""
    import harness.agent.gating as gating

    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=3, candidates_per_round=1, archs=["sm_90a"],
                         promote=True, retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1,
                         time_limit_s=1.0)
    mp = pytest.MonkeyPatch()
    mp.setattr(gating, "run_full_gates", lambda *a, **kw: pytest.fail("gates started past the time limit"))
    try:
        with ScriptedLLM([("reply", fenced(tiny_kernel()))]) as srv:
            cfg.base_url = srv.url + "/v1"
            opt = start(cfg, run_id="t-late", stages=SlowVerifiedStages())
            st = opt.run()
    finally:
        mp.undo()
    (cid,) = st.records                                  # rounds 2 and 3 never started either
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    g = summary["gates"]
    assert g["ran"] is False and g["candidate"] == cid
    assert g["reason"] == (f"time limit reached; gate it later: harness gate {OP} {cid}, with the run's other "
                           f"untracked drafts moved out of kernels_generated/{OP}/")
    assert summary["promoted"]["ok"] is False and summary["promoted"]["reason"].startswith("gates not run: time limit")
    assert not (project / "kernels_generated" / OP / cid / "evidence").exists()


def test_the_gate_command_a_skipped_run_names_passes_isolation_when_followed(project, run_cli):
    """The `harness gate` command that `gates.reason` names judges isolation on the working tree,
    where the run's other drafts lie untracked beside the best one: run as is, it fails isolation
    ("change outside the candidate folder"). The reason says to move them out first; done so, the
    command passes isolation."""
    import harness.agent.gating as gating

    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=2, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, time_limit_s=1.0)
    mp = pytest.MonkeyPatch()
    mp.setattr(gating, "run_full_gates", lambda *a, **kw: pytest.fail("gates started past the time limit"))
    try:
        with ScriptedLLM([("reply", fenced(tiny_kernel())), ("reply", fenced("# two\n" + tiny_kernel()))]) as srv:
            cfg.base_url = srv.url + "/v1"
            st = start(cfg, run_id="t-by-hand", stages=SlowVerifiedStages()).run()
    finally:
        mp.undo()
    best, other = st.ranked()[0].id, next(c for c in st.records if c != st.ranked()[0].id)
    reason = st.gates["reason"]
    assert st.gates["ran"] is False and st.gates["candidate"] == best
    cmd = reason.split("gate it later: ", 1)[1]
    assert cmd.startswith(f"harness gate {OP} {best}, ") and "other untracked drafts moved out of" in cmd, reason
    argv = cmd.split(",")[0].split()[1:] + ["--only", "isolation", "--no-write"]
    code, out, _ = run_cli(argv)                                    # the sibling draft fails it
    assert code == 1 and f"change outside the candidate folder: kernels_generated/{OP}/{other}/" in out, out
    parked = project.parent / "parked"
    parked.mkdir()
    shutil.move(str(project / "kernels_generated" / OP / other), str(parked / other))
    code, out, err = run_cli(argv)
    assert code == 0 and "PASS" in out, out + err


def _candidate_folder(root: Path, cid: str) -> None:
    d = root / "kernels_generated" / OP / cid
    d.mkdir(parents=True)
    (d / "kernel.py").write_text(f"# candidate {cid}\n")
    (d / "candidate.json").write_text(json.dumps({"op": OP, "id": cid}))


def test_isolation_judges_the_pr_shaped_change(project):
    """The loop leaves sibling candidate folders and the user may have uncommitted work: the
    promotion would bring neither, so isolation_as_pr passes where the plain working-tree gate
    fails; a committed change to a frozen path on the branch still fails it."""
    from gates import GateContext, GateName
    from gates.config import config_path, load_config
    from gates.suite import run_gates
    from harness.agent.gating import isolation_as_pr

    _candidate_folder(project, "aaaaaaaaaaaa")
    _candidate_folder(project, "bbbbbbbbbbbb")                       # a sibling from the same run
    (project / "reference_impls" / "moe_router.py").write_text("# uncommitted edit\n", encoding="utf-8")
    ctx = GateContext(op=OP, candidate_id="aaaaaaaaaaaa", root=project, config=load_config(config_path(project)))

    (plain,) = run_gates(ctx, only=[GateName.ISOLATION])
    assert plain.verdict.value == "fail"
    assert any("bbbbbbbbbbbb" in r for r in plain.reasons) and any("reference_impls" in r for r in plain.reasons)

    pr = isolation_as_pr(ctx)
    assert pr.verdict.value == "pass", pr.reasons
    assert pr.numbers["pr_shaped"]["adds_only"] == f"kernels_generated/{OP}/aaaaaaaaaaaa"
    assert pr.numbers["changed_paths"] == 2                             # kernel.py, candidate.json
    assert _git(project, "worktree", "list").count("\n") == 0           # the throwaway tree is gone

    # the branch itself commits a frozen-path change: the PR-shaped change still carries it
    _git(project, "checkout", "-q", "-b", "feature")
    _git(project, "commit", "-q", "-am", "edit the reference")
    pr = isolation_as_pr(ctx)
    assert pr.verdict.value == "fail" and any("reference_impls/moe_router.py" in r for r in pr.reasons), pr.reasons


class LimitPassesDuringFirstEvaluation(VerifiedOnPaperStages):
    """A GPU run (has_gpu) whose --time-limit passes while the first draft is being evaluated."""

    def __init__(self) -> None:
        super().__init__()
        self.has_gpu = True
        self.budget = None

    def evaluate(self, cand) -> EvalInfo:
        info = super().evaluate(cand)
        if self.budget is not None:
            self.budget.time_limit_s = 0.0
        return info


def test_the_time_limit_stops_gpu_evaluations_mid_round_and_resume_finishes_them(project, capsys):
    """No GPU evaluation (tens of seconds each) starts past --time-limit, even inside a round:
    the round stays open, the STOPPED event names the drafts left and the resume command, and
    `--resume` evaluates exactly those, finishes the round and runs the gates it had skipped."""
    import harness.agent.gating as gating
    from harness.agent.loop import resume

    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=2, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1, time_limit_s=3600.0)
    first = LimitPassesDuringFirstEvaluation()
    gated: list[str] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(gating, "run_full_gates", lambda op, cid, *a, **kw: gated.append(cid) or
               {"candidate": cid, "passed": False, "verdicts": {}, "evidence": None})
    try:
        with ScriptedLLM([("reply", fenced(tiny_kernel())), ("reply", fenced("# two\n" + tiny_kernel()))]) as srv:
            cfg.base_url = srv.url + "/v1"
            said: list[str] = []
            opt = start(cfg, run_id="t-limit", stages=first, listener=lambda msg, state: said.append(msg))
            first.budget = opt.budget
            st = opt.run()
        ids = st.round_ids(1)
        assert len(ids) == 2 and first.evaluated == ids[:1]
        assert 1 not in st.rounds_finished and gated == []
        log = RunLog.open(project / "runs", "t-limit")
        (stop,) = [e for e in log.events if e.kind is EventKind.STOPPED]
        assert stop.data["not_evaluated"] == ids[1:] and stop.data["reason"] == "time limit reached"
        assert any(m.startswith("stopped: time limit reached; not evaluated: ") and
                   m.endswith(f"(harness optimize --op {OP} --resume t-limit)") for m in said)
        assert st.gates["ran"] is False and st.gates["reason"].startswith("time limit reached")
        summary = json.loads((opt.log.folder / "summary.json").read_text())
        assert summary["not_evaluated"] == ids[1:]
        from harness.agent.display import print_summary

        print_summary(summary)                           # what a person reads at the end
        shown = " ".join(capsys.readouterr().out.split())
        assert f"not evaluated on the GPU: {ids[1]} (harness optimize --op {OP} --resume t-limit)" in shown

        second = VerifiedOnPaperStages()
        second.has_gpu = True
        again = resume("t-limit", {"time_limit_s": None}, stages=second)
        st2 = again.run()
    finally:
        mp.undo()
    assert second.evaluated == ids[1:]                      # only the draft left, nothing twice
    assert 1 in st2.rounds_finished and st2.finished and st2.stopped is None
    assert {r.id for r in st2.ranked()} == set(ids)
    assert gated == [st2.ranked()[0].id] and st2.gates["ran"] is True
    assert json.loads((again.log.folder / "summary.json").read_text())["not_evaluated"] == []


class TimedOnPaperStages(VerifiedOnPaperStages):
    """A GPU machine (has_gpu) whose evaluate claims a verification with a time per candidate,
    in the order the candidates are evaluated (the only double: no CUDA GPU here)."""

    def __init__(self, kernel_us: list[float]) -> None:
        super().__init__()
        self.has_gpu = True
        self.kernel_us = list(kernel_us)

    def evaluate(self, cand) -> EvalInfo:
        self.evaluated.append(cand.id)
        us = self.kernel_us[len(self.evaluated) - 1]
        return EvalInfo(StageStatus.OK, "OK", "verified on paper (test double)",
                        timings=[Timing(batch=1, tp=8, kernel_us=us)])


def _cpu_run_of_two_drafts(run_id: str) -> tuple[OptimizeConfig, list[str]]:
    """A run of two drafts on this machine (no GPU: static and compile run, evaluate does not)."""
    cfg = OptimizeConfig(op=OP, agent="openai:gpt-4o", rounds=1, candidates_per_round=2, archs=["sm_90a"],
                         retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1)
    with ScriptedLLM([("reply", fenced(tiny_kernel())), ("reply", fenced("# two\n" + tiny_kernel()))]) as srv:
        cfg.base_url = srv.url + "/v1"
        st = start(cfg, run_id=run_id, stages=ToolchainStages(use_gpu=False)).run()
    return cfg, st.round_ids(1)


def test_drafts_compiled_without_a_gpu_are_measured_when_the_run_resumes_on_one(project, capsys):
    """Drafting and compiling need no GPU: a run on a machine without one ranks its drafts by
    compile feedback and says how to measure them; `--resume` on a machine with a GPU evaluates
    exactly those drafts (once), ranks them by measured time and decides the gates again."""
    import harness.agent.gating as gating
    from harness.agent.display import print_summary
    from harness.agent.loop import resume
    from harness.agent.records import ScoreKind

    _, ids = _cpu_run_of_two_drafts("t-defer")
    cpu = json.loads((project / "runs" / "t-defer" / "summary.json").read_text())
    assert len(ids) == 2 and cpu["not_measured"] == ids and cpu["verified"] == 0
    assert cpu["gates"]["ran"] is False
    assert cpu["gates"]["reason"].endswith(f"`harness optimize --op {OP} --resume t-defer` measures the 2 compiled drafts")
    print_summary(cpu)
    shown = " ".join(capsys.readouterr().out.split())
    assert (f"compiled, not measured (no GPU here): 2 drafts; on a machine with a GPU, "
            f"`harness optimize --op {OP} --resume t-defer` measures them") in shown

    gated: list[str] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(gating, "run_full_gates", lambda op, cid, *a, **kw: gated.append(cid) or
               {"candidate": cid, "passed": False, "verdicts": {}, "evidence": None})
    gpu = TimedOnPaperStages([9.0, 4.0])            # the second draft is the faster one
    try:
        st = resume("t-defer", stages=gpu).run()
        assert gpu.evaluated == ids
        assert all(st.records[c].score_kind is ScoreKind.TIME_US for c in ids)
        assert [r.id for r in st.ranked()] == [ids[1], ids[0]] and st.deferred() == []
        assert gated == [ids[1]] and st.gates["ran"] is True and st.finished
        summary = json.loads((project / "runs" / "t-defer" / "summary.json").read_text())
        assert summary["not_measured"] == [] and summary["best"]["id"] == ids[1] and summary["verified"] == 2

        again = resume("t-defer", stages=gpu).run()    # nothing left to measure: nothing runs twice
    finally:
        mp.undo()
    assert gpu.evaluated == ids and gated == [ids[1]]
    assert again.ranked()[0].id == ids[1]
    replayed = RunLog.open(project / "runs", "t-defer")
    assert sum(1 for e in replayed.events if e.kind is EventKind.STAGE and e.data["stage"] == "evaluate") == 4


def test_measuring_deferred_drafts_stops_at_the_time_limit_and_resumes_later(project):
    """The GPU evaluations of deferred drafts start only within --time-limit; those left are
    named with the resume command and measured by the next resume."""
    from harness.agent.loop import resume

    _, ids = _cpu_run_of_two_drafts("t-defer-limit")
    gpu = TimedOnPaperStages([3.0, 2.0])
    st = resume("t-defer-limit", {"time_limit_s": 0.0}, stages=gpu).run()
    assert gpu.evaluated == [] and st.deferred() == ids
    stops = [e for e in RunLog.open(project / "runs", "t-defer-limit").events if e.kind is EventKind.STOPPED]
    assert stops and stops[-1].data["not_evaluated"] == ids
    st = resume("t-defer-limit", {"time_limit_s": None}, stages=gpu).run()
    assert gpu.evaluated == ids and st.deferred() == [] and st.best_verified().id == ids[1]


def test_resuming_on_a_gpu_without_the_drafts_folders_names_them(project):
    """The drafts live in kernels_generated/<op>/<id>/, beside the run folder: resumed on a
    machine that lacks one, the run stops with one readable error naming it and measures nothing."""
    from harness.agent.loop import resume
    from harness.errors import UserError

    _, ids = _cpu_run_of_two_drafts("t-defer-missing")
    shutil.rmtree(project / "kernels_generated" / OP / ids[1])
    gpu = TimedOnPaperStages([3.0, 2.0])
    with pytest.raises(UserError, match=f"not on this machine: {ids[1]}; copy kernels_generated/{OP}/<id>/"):
        resume("t-defer-missing", stages=gpu).run()
    assert gpu.evaluated == []
