"""Agent runs (runs/<run-id>/events.jsonl) as views, replayed with the agent's own reader
and state machine (harness/agent/runlog.py, state.py). A run in progress is read without
touching its log: RunLog.open would cut a torn tail that the writer is still appending."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .model import EventRow, LlmCallRow, RoundRow, RunCandidateRow, RunView

MAX_EVENTS = 400              # the run page lists the newest events only


def collect_runs(runs_dir: Path, warnings: list[str]) -> list[RunView]:
    out = []
    folders = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    for folder in folders:
        if not (folder / "events.jsonl").is_file():
            continue
        try:
            out.append(read_run(folder))
        except Exception as exc:  # noqa: BLE001 - one unreadable run must not hide the others
            warnings.append(f"runs/{folder.name}: unreadable ({type(exc).__name__}: {exc})")
            out.append(RunView(id=folder.name, error=f"{type(exc).__name__}: {exc}"))
    return sorted(out, key=lambda r: (r.started_ts or 0.0, r.id), reverse=True)


def read_run(folder: Path) -> RunView:
    from ..agent.runlog import EventKind, RunLog
    from ..agent.state import RunState

    log = RunLog(folder)
    log.events = list(log._replay())        # read-only replay; stops at a torn last line
    st = RunState.replay(log)
    cfg = st.config or {}
    rv = RunView(id=folder.name, op=str(cfg.get("op", "")), agent=str(cfg.get("agent", "")), config=cfg,
                 started_ts=log.events[0].ts if log.events else None,
                 last_ts=log.events[-1].ts if log.events else None, finished=st.finished, stopped=st.stopped,
                 tokens=st.tokens, cost_usd=st.cost_usd, gates=st.gates, promoted=st.promoted,
                 not_measured=st.deferred())
    started: dict[int, float] = {}
    finished: dict[int, tuple[float, Any, Any]] = {}
    drafted_ts: dict[str, float] = {}
    for e in log.events:
        d = e.data
        if e.kind is EventKind.ROUND_STARTED:
            started.setdefault(d["round"], e.ts)
        elif e.kind is EventKind.ROUND_FINISHED:
            finished[d["round"]] = (e.ts, d.get("best"), d.get("best_score"))
        elif e.kind is EventKind.DRAFT:
            drafted_ts.setdefault(d["id"], e.ts)
        elif e.kind is EventKind.LLM_CALL:
            rv.llm_calls.append(LlmCallRow(ts=e.ts, provider=str(d.get("provider", "")), model=str(d.get("model", "")),
                                           attempt=int(d.get("attempt", 0) or 0), outcome=str(d.get("outcome", "")),
                                           input_tokens=int(d.get("input_tokens", 0) or 0),
                                           output_tokens=int(d.get("output_tokens", 0) or 0),
                                           cost_usd=d.get("cost_usd"), detail=str(d.get("detail", ""))))
        rv.events.append(EventRow(e.seq, e.ts, e.kind.value, _describe(e.kind.value, d)))
    rv.events = rv.events[-MAX_EVENTS:][::-1]
    for r in sorted(st.rounds_started | set(finished)):
        fin = finished.get(r)
        rv.rounds.append(RoundRow(round=r, started_ts=started.get(r), finished_ts=fin[0] if fin else None,
                                  candidates=st.round_ids(r), best=fin[1] if fin else None,
                                  best_score=fin[2] if fin else None,
                                  failed_slots=sum(1 for (rr, _) in st.failed_slots if rr == r)))
    for rec in sorted(st.records.values(), key=lambda c: (c.round, c.slot)):
        rv.records[rec.id] = rec.to_json()
        rv.candidates.append(RunCandidateRow(
            id=rec.id, round=rec.round, slot=rec.slot, author=rec.author, family=rec.family, params=rec.params,
            static="-" if rec.static_ok is None else ("ok" if rec.static_ok else "refused"),
            compile={a: c.status.value for a, c in sorted(rec.compile.items())},
            evaluate=rec.evaluate.verdict if rec.evaluate else "-", score=rec.score,
            score_kind=rec.score_kind.value if rec.score_kind else None, summary=rec.summary(),
            drafted_ts=drafted_ts.get(rec.id)))
    return rv


def _describe(kind: str, d: dict[str, Any]) -> str:
    """One line per event for the run's timeline."""
    if kind == "stage":
        r = d.get("result") or {}
        what = r.get("status") or r.get("verdict") or ("ok" if r.get("ok") else "refused" if "ok" in r else "")
        arch = f" {r['arch']}" if r.get("arch") else ""
        if d.get("stage") == "score":
            what = f"{r.get('score')} ({r.get('kind')})"
        return f"{d.get('id')}: {d.get('stage')}{arch} {what}"
    if kind == "draft":
        return f"round {d.get('round')} slot {d.get('slot')}: {d.get('id')} by {d.get('author')}"
    if kind == "draft_failed":
        return f"round {d.get('round')} slot {d.get('slot')}: {d.get('reason', '')}"[:300]
    if kind == "llm_call":
        return (f"{d.get('provider')}/{d.get('model')} attempt {d.get('attempt')}: {d.get('outcome')}, "
                f"{d.get('input_tokens', 0)} in / {d.get('output_tokens', 0)} out tokens")
    if kind in ("round_started", "round_finished"):
        extra = f", best {d.get('best')} ({d.get('best_score')})" if kind == "round_finished" and d.get("best") else ""
        return f"round {d.get('round')}{extra}"
    if kind == "proposals":
        near = f" (around the promoted {d['around']})" if d.get("around") and d.get("round") == 1 else ""
        return f"round {d.get('round')}: {len(d.get('proposals', []))} configurations{near}"
    if kind in ("gates", "promoted"):
        return ", ".join(f"{k}={v}" for k, v in d.items() if isinstance(v, (str, int, float, bool)))[:300]
    if kind == "stopped":
        left = d.get("not_evaluated") or []
        return f"stopped: {d.get('reason')}" + (f"; not evaluated: {', '.join(left)} (--resume evaluates them)"
                                                if left else "")
    if kind == "run_resumed":
        return f"resumed (rounds finished before: {', '.join(map(str, d.get('rounds_finished') or [])) or 'none'})"
    if kind == "run_started":
        return f"op {(d.get('config') or {}).get('op')}, agent {(d.get('config') or {}).get('agent')}"
    return ""
