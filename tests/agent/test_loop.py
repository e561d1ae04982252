"""The agent loop end to end with an LLM on a local server: malformed reply retried, a
broken kernel then its fix fed by the compile/static feedback, untrusted replies confined
to their candidate folder, no key under runs/, and resume after SIGKILL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.agent.loop import OptimizeConfig, resume, start
from harness.agent.runlog import EventKind, RunLog

from .conftest import FAKE_ANTHROPIC_KEY, FAKE_OPENAI_KEY, fenced, files_contain, tiny_kernel
from .llm_server import ScriptedLLM

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BROKEN = "import os\n" + tiny_kernel()          # static checks refuse `import os`


def _cfg(agent: str, url: str, **kw) -> OptimizeConfig:
    base = dict(op="moe_router", agent=agent, base_url=url, rounds=2, candidates_per_round=1,
                archs=["sm_90a"], retry_base_delay_s=0.05, request_timeout_s=20.0, compile_workers=1)
    base.update(kw)
    return OptimizeConfig(**base)


def test_broken_then_fixed_with_malformed_reply(harness_root):
    script = [("reply", "I cannot write code today."),                      # malformed: retried
              ("reply", fenced(BROKEN)),                                     # round 1: static reject
              ("reply", fenced(tiny_kernel(), "Fixed: removed the import."))]  # round 2: the fix
    with ScriptedLLM(script) as srv:
        opt = start(_cfg("openai:gpt-4o", srv.url + "/v1"), run_id="t-fix")
        st = opt.run()
    assert len(srv.requests) == 3
    # the retry of the malformed reply says what was wrong; round 2 carries round 1's feedback
    retry_msgs = srv.requests[1]["body"]["messages"]
    assert "no ```python fenced block" in retry_msgs[-1]["content"]
    fb = srv.requests[2]["body"]["messages"]
    assert fb[-2]["role"] == "assistant" and "import os" in fb[-2]["content"]
    assert "forbidden_import" in fb[-1]["content"] or "os" in fb[-1]["content"]
    recs = sorted(st.records.values(), key=lambda r: r.round)
    assert [r.static_ok for r in recs] == [False, True]
    fixed = recs[1]
    assert fixed.parent == recs[0].id and fixed.author == "llm:openai-compatible/gpt-4o"
    assert fixed.compile["sm_90a"].status.value == "ok" and fixed.compile["sm_90a"].registers
    meta = json.loads((harness_root / "kernels_generated" / "moe_router" / fixed.id / "candidate.json").read_text())
    assert meta["provenance"]["prompt_hash"] == fixed.prompt_hash and len(fixed.prompt_hash) == 64
    summary = json.loads((opt.log.folder / "summary.json").read_text())
    assert summary["best"]["id"] == fixed.id and summary["gpu_stages"].startswith("not run")
    assert summary["gates"]["ran"] is False
    # the reply's "write to gates/..." did nothing: only candidate folders and the run exist
    assert sorted(p.name for p in harness_root.iterdir()) == ["kernels_generated", "runs"]
    assert not files_contain(harness_root / "runs", FAKE_OPENAI_KEY)
    assert not files_contain(harness_root / "runs", FAKE_ANTHROPIC_KEY)
    assert (opt.log.folder / "prompts").is_dir() and len(list((opt.log.folder / "replies").iterdir())) == 3


_CHILD = r"""
import sys, warnings
warnings.simplefilter("ignore")
from harness.agent.loop import OptimizeConfig, start
cfg = OptimizeConfig(op="moe_router", agent="anthropic:claude-test", base_url=sys.argv[1], rounds=3,
                     candidates_per_round=2, archs=["sm_90a"], retry_base_delay_s=0.05,
                     request_timeout_s=120.0, max_attempts=1)
start(cfg, run_id="t-kill").run()
"""


def _broken(n: int) -> str:
    return fenced(f"# variant {n}\n" + BROKEN)


def test_resume_after_sigkill_loses_and_repeats_nothing(harness_root):
    # round 1 answers; every later request stalls: the child is killed while waiting
    with ScriptedLLM([("reply", _broken(1)), ("reply", _broken(2))]) as srv:
        srv.default = None
        srv.script += [("stall", 120)] * 4
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        child = subprocess.Popen([sys.executable, "-c", _CHILD, srv.url], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        events = harness_root / "runs" / "t-kill" / "events.jsonl"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(srv.requests) < 4:
            time.sleep(0.2)
        assert len(srv.requests) >= 4, child.stderr.read().decode()[-2000:] if child.poll() is not None else "no stall"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
    before = [json.loads(l) for l in events.read_text().splitlines()]
    assert sum(e["kind"] == "round_finished" for e in before) == 1
    assert sum(e["kind"] == "draft" for e in before) == 2

    with ScriptedLLM([("reply", _broken(n)) for n in range(3, 7)]) as srv2:
        opt = resume("t-kill", {"base_url": srv2.url})
        st = opt.run()
    assert len(srv2.requests) == 4                     # rounds 2 and 3 only: round 1 was not redone
    after = RunLog.open(harness_root / "runs", "t-kill").events
    drafts = [(e.data["round"], e.data["slot"]) for e in after if e.kind is EventKind.DRAFT]
    assert sorted(drafts) == [(r, s) for r in (1, 2, 3) for s in (0, 1)]   # each slot exactly once
    stages = [(e.data["id"], e.data["stage"]) for e in after if e.kind is EventKind.STAGE]
    assert len(stages) == len(set(stages))             # no stage ran twice
    assert [e.seq for e in after] == list(range(1, len(after) + 1))
    assert st.finished and sorted(st.rounds_finished) == [1, 2, 3]
    assert any(e.kind is EventKind.RUN_RESUMED for e in after)
    assert not files_contain(harness_root / "runs", FAKE_ANTHROPIC_KEY)


def test_compile_workers_follow_the_toolchains_default_unless_set(harness_root, monkeypatch):
    """The loop compiled 2 at a time on the 16-core H200 host (session 24: 9 compiles took
    ~50 s); it now uses the toolchain's default, one per core up to 8, or HARNESS_COMPILE_JOBS."""
    monkeypatch.setenv("HARNESS_COMPILE_JOBS", "5")
    assert start(OptimizeConfig(op="moe_router", agent="openai:gpt-4o"), run_id="t-jobs").compile_workers() == 5
    assert start(OptimizeConfig(op="moe_router", agent="openai:gpt-4o", compile_workers=1), run_id="t-jobs1").compile_workers() == 1
    monkeypatch.delenv("HARNESS_COMPILE_JOBS")
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert start(OptimizeConfig(op="moe_router", agent="openai:gpt-4o"), run_id="t-jobs16").compile_workers() == 8
