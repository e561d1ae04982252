"""Section 2: durability of `harness optimize` and of the atomic writers under SIGKILL.

Runs in a helper process (`python -m harness.selftest.durability <json>`, single-threaded,
torch imported once) that forks the workers it kills, so 50 kills cost 50 forks, not 50
interpreter starts. The optimize worker calls harness.agent.loop.start / resume - what
`harness optimize` and `harness optimize --resume` call - with the template agent, one arch
and a warm compile cache (a first, uninterrupted run warms it and is the reference).

Checks after each killed-and-resumed run, against the reference run:
  lost        reference records (drafts per slot, stages per candidate/arch, rounds) missing
  duplicated  records present more than once, or event seq numbers not exactly 1..n
  unparsable  lines of events.jsonl, summary.json or candidates/*.json that do not parse
Atomic writes: a child rewriting summary-sized JSON (atomic_write_text) or appending events
(RunLog.append) is killed at random points; the file must hold the old or the new version.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _child_run(run_id: str, resume: bool, cfg_json: dict[str, Any]) -> None:
    from harness.agent.loop import OptimizeConfig, resume as resume_run, start
    from harness.agent.stages import ToolchainStages

    stages = ToolchainStages(use_gpu=False)
    opt = resume_run(run_id, stages=stages) if resume else start(OptimizeConfig.from_json(cfg_json), run_id,
                                                                   stages=stages)
    opt.run()


def _fork(fn, *args) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            fn(*args)
        except BaseException:                   # noqa: BLE001 - the parent reads the files, not this
            code = 1
        os._exit(code)
    return pid


def _run_until(run_id: str, resume: bool, cfg: dict[str, Any], kill_after_s: float | None) -> tuple[bool, int]:
    """Fork a worker; SIGKILL it after kill_after_s (None: let it finish). (killed, exit code)."""
    pid = _fork(_child_run, run_id, resume, cfg)
    t0 = time.monotonic()
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return False, os.waitstatus_to_exitcode(status)
        if kill_after_s is not None and time.monotonic() - t0 >= kill_after_s:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return True, -9
        time.sleep(0.002)


def _keys(events: list[dict[str, Any]]) -> Counter:
    """The identity of each record that must appear exactly once in a finished run."""
    c: Counter = Counter()
    for e in events:
        k, d = e["kind"], e["data"]
        if k == "draft":
            c[("draft", d["round"], d["slot"], d["id"])] += 1
        elif k == "draft_failed":
            c[("draft_failed", d["round"], d["slot"])] += 1
        elif k == "stage":
            c[("stage", d["id"], d["stage"], (d.get("result") or {}).get("arch"))] += 1
        elif k in ("round_started", "round_finished", "proposals"):
            c[(k, d["round"])] += 1
        elif k in ("run_started", "run_finished", "gates"):
            c[(k,)] += 1
    return c


def inspect_run(folder: Path) -> dict[str, Any]:
    """Parse every file of a run folder; count unparsable lines/files and seq problems."""
    unparsable, events = 0, []
    lines = (folder / "events.jsonl").read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        if not line and i == len(lines) - 1:
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            unparsable += 1
    for p in [folder / "summary.json", *sorted((folder / "candidates").glob("*.json"))]:
        try:
            json.loads(p.read_text())
        except (OSError, ValueError):
            unparsable += 1
    seqs = [e.get("seq") for e in events]
    return {"events": events, "unparsable": unparsable, "seq_ok": seqs == list(range(1, len(seqs) + 1)),
            "tmp_left": len(list(folder.rglob("*.tmp")))}


def optimize_kills(n_kills: int, kills_per_run: int, seed: int, cfg: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(seed)
    t0 = time.monotonic()
    killed, code = _run_until("reference", False, cfg, None)
    ref_s = time.monotonic() - t0                 # first run warms the compile cache
    t0 = time.monotonic()
    _run_until("reference-warm", False, cfg, None)
    warm_s = time.monotonic() - t0
    runs_dir = Path(os.environ["HARNESS_ROOT"]) / "runs"
    ref = inspect_run(runs_dir / "reference-warm")
    ref_keys = _keys(ref["events"])
    out: dict[str, Any] = {"kills": 0, "runs": 0, "lost": 0, "duplicated": 0, "unparsable": 0, "seq_errors": 0, "tmp_left": 0,
           "unfinished": 0, "reference_events": len(ref["events"]), "reference_run_s": warm_s,
           "cold_run_s": ref_s, "reference_exit": code, "kill_times_s": []}
    while out["kills"] < n_kills:
        run_id = f"killed-{out['runs']}"
        out["runs"] += 1
        resume = False
        for _ in range(kills_per_run):
            at = rng.uniform(0.0, warm_s * 1.1)
            was_killed, _ = _run_until(run_id, resume, cfg, at)
            if not (runs_dir / run_id / "events.jsonl").exists():
                shutil.rmtree(runs_dir / run_id, ignore_errors=True)    # killed before the first event
                continue
            resume = True
            if was_killed:
                out["kills"] += 1
                out["kill_times_s"].append(round(at, 4))
        _run_until(run_id, resume, cfg, None)
        got = inspect_run(runs_dir / run_id)
        keys = _keys(got["events"])
        out["lost"] += sum(1 for k in ref_keys if k not in keys)
        out["duplicated"] += sum(n - 1 for n in keys.values() if n > 1)
        out["unparsable"] += got["unparsable"]
        out["seq_errors"] += int(not got["seq_ok"])
        out["tmp_left"] += got["tmp_left"]
        out["unfinished"] += int(("run_finished",) not in keys)
    return out


def _rewrite_forever(path: str, pad: int) -> None:
    from harness.agent.runlog import atomic_write_text

    i = 0
    while True:
        i += 1
        atomic_write_text(Path(path), json.dumps({"version": i, "pad": "x" * pad, "end": i}))


def _append_forever(folder: str) -> None:
    from harness.agent.runlog import EventKind, RunLog

    log = RunLog.open(Path(folder).parent, Path(folder).name)
    while True:
        log.append(EventKind.STAGE, id="x" * 64, stage="compile", result={"pad": "y" * 20000})


def atomic_kills(n: int, seed: int) -> dict[str, Any]:
    """Kill a summary rewriter and an event appender n times each at random points."""
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="selftest-atomic-"))
    out = {"atomic_kills": 0, "torn_summaries": 0, "append_kills": 0, "torn_logs": 0, "append_seq_errors": 0}
    target = tmp / "summary.json"
    for i in range(n):
        pid = _fork(_rewrite_forever, str(target), 1 << 20)
        time.sleep(rng.uniform(0.02, 0.3))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        out["atomic_kills"] += 1
        try:
            d = json.loads(target.read_text()) if target.exists() else None
            if d is not None and (d["version"] != d["end"] or len(d["pad"]) != 1 << 20):
                out["torn_summaries"] += 1
        except ValueError:
            out["torn_summaries"] += 1
    from harness.agent.runlog import EventKind, RunLog

    log = RunLog.create(tmp, "appender")
    log.append(EventKind.RUN_STARTED, config={})
    for i in range(n):
        pid = _fork(_append_forever, str(tmp / "appender"))
        time.sleep(rng.uniform(0.02, 0.2))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        out["append_kills"] += 1
        try:
            reopened = RunLog.open(tmp, "appender")
        except ValueError:
            out["torn_logs"] += 1
            continue
        got = inspect_run_events(tmp / "appender" / "events.jsonl")
        out["torn_logs"] += got["unparsable"]
        out["append_seq_errors"] += int(not got["seq_ok"]) + int(len(reopened.events) != got["n"])
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def inspect_run_events(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    lines = data.split(b"\n")
    bad, seqs = 0, []
    for i, line in enumerate(lines):
        if not line and i == len(lines) - 1:
            continue
        try:
            seqs.append(json.loads(line)["seq"])
        except (ValueError, KeyError):
            bad += 1
    return {"unparsable": bad, "seq_ok": seqs == list(range(1, len(seqs) + 1)), "n": len(seqs)}


def main() -> None:
    args = json.loads(sys.argv[1])
    out = optimize_kills(args["kills"], args["kills_per_run"], args["seed"], args["config"])
    out.update(atomic_kills(args["atomic_kills"], args["seed"]))
    sys.stdout.write("SELFTEST-JSON " + json.dumps(out) + "\n")


def run_durability(kills: int, atomic: int, root: Path, seed: int | None = None,
                   timeout_s: float = 1500.0) -> dict[str, Any]:
    """Run the helper process under HARNESS_ROOT=root (prompts copied in); its result dict."""
    import subprocess

    from .. import paths

    if not (root / "prompts").exists():
        shutil.copytree(paths.REPO_ROOT / "prompts", root / "prompts")
    cfg = {"op": "moe_router", "agent": "template", "rounds": 2, "candidates_per_round": 2,
           "archs": ["sm_90a"], "run_gates": False, "compile_workers": 1, "seed": 0}
    arg = json.dumps({"kills": kills, "kills_per_run": 5, "seed": seed if seed is not None else random.randrange(1 << 30),
                      "atomic_kills": atomic, "config": cfg})
    env = {**os.environ, "HARNESS_ROOT": str(root), "PYTHONPATH": str(paths.REPO_ROOT)}
    r = subprocess.run([sys.executable, "-m", "harness.selftest.durability", arg], capture_output=True, text=True,
                       timeout=timeout_s, env=env, cwd=str(root))
    for line in r.stdout.splitlines():
        if line.startswith("SELFTEST-JSON "):
            return json.loads(line[len("SELFTEST-JSON "):])
    raise RuntimeError(f"durability helper failed (exit {r.returncode}): {r.stderr.strip()[-600:]}")


if __name__ == "__main__":
    main()
