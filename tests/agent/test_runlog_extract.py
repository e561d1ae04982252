"""Run-log durability (torn tails, atomic writes), key scrubbing and reply extraction."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from harness.agent import extract as extract_mod
from harness.agent.extract import ReplyProblem, extract_kernel
from harness.agent.runlog import EventKind, RunLog
from harness.agent.secrets import REDACTED, scrub

from .conftest import FAKE_OPENAI_KEY, fenced, tiny_kernel


def test_torn_tail_is_dropped_and_appends_continue(tmp_path):
    log = RunLog.create(tmp_path, "r1")
    log.append(EventKind.ROUND_STARTED, round=1)
    log.append(EventKind.ROUND_FINISHED, round=1)
    with open(log.events_path, "a") as f:
        f.write('{"seq": 3, "kind": "round_sta')          # the process died mid-write
    again = RunLog.open(tmp_path, "r1")
    assert [e.seq for e in again.events] == [1, 2]
    again.append(EventKind.ROUND_STARTED, round=2)
    lines = [json.loads(l) for l in again.events_path.read_text().splitlines()]
    assert [l["seq"] for l in lines] == [1, 2, 3] and lines[2]["data"] == {"round": 2}


def test_keys_are_scrubbed_from_events_and_files(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_OPENAI_KEY)
    log = RunLog.create(tmp_path, "r2")
    log.append(EventKind.LLM_CALL, detail=f"401: bad key {FAKE_OPENAI_KEY}", header="x-api-key: abcdefgh12345")
    log.write_text("replies", "a.md", f"the key is {FAKE_OPENAI_KEY}")
    blob = b"".join(p.read_bytes() for p in (tmp_path / "r2").rglob("*") if p.is_file())
    assert FAKE_OPENAI_KEY.encode() not in blob and b"abcdefgh12345" not in blob
    assert REDACTED in scrub("Authorization: Bearer sk-abcdefghijklmnopqrstuv")


def test_extract_takes_only_the_fenced_module():
    ok = extract_kernel(fenced(tiny_kernel()))
    assert ok.ok and ok.code == tiny_kernel()
    assert extract_kernel("just prose").problem is ReplyProblem.NO_CODE
    assert extract_kernel("```python\ndef compile(:\n```\n").problem is ReplyProblem.SYNTAX
    assert extract_kernel("```python\ndef compile(tp, options): pass\n```\n").problem is ReplyProblem.MISSING_API
    two = fenced(tiny_kernel()) + fenced(tiny_kernel())
    assert extract_kernel(two).problem is ReplyProblem.AMBIGUOUS
    helper = "```python\nx = 1\n```\n" + fenced(tiny_kernel())     # a snippet plus the module: the module wins
    assert extract_kernel(helper).code == tiny_kernel()


def test_parallel_drafts_parse_one_at_a_time(monkeypatch):
    """The loop extracts several drafts' replies at once; CPython 3.11's AST constructor is not
    thread-safe (CI failed on it with "AST constructor recursion depth mismatch"), so parses
    must not overlap. A slow stand-in for ast.parse counts how many threads are inside it."""
    real_parse = extract_mod.ast.parse
    inside, most = 0, 0
    count_lock = threading.Lock()

    def slow_parse(source, *args, **kwargs):
        nonlocal inside, most
        with count_lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)
        try:
            return real_parse(source, *args, **kwargs)
        finally:
            with count_lock:
                inside -= 1

    monkeypatch.setattr(extract_mod.ast, "parse", slow_parse)
    reply = "two blocks\n" + fenced(tiny_kernel()) + "\n" + fenced("x = 1\n")
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: extract_kernel(reply), range(16)))
    assert all(r.ok and r.code == results[0].code for r in results)
    assert most == 1


def test_atomic_rewrites_get_open_permissions_not_mkstemps(tmp_path):
    """A run's summary.json (and an op's committed ledger) used to come out 0600: mkstemp's mode,
    handed on by the rename. A new file gets what open() gives (0666 less the umask), as the run's
    events.jsonl beside it does; a rewrite keeps the file's own mode."""
    import os
    import stat

    from harness.agent.runlog import atomic_write_text

    def mode(p):
        return stat.S_IMODE(p.stat().st_mode)

    old = os.umask(0o027)
    try:
        log = RunLog.create(tmp_path, "r1")
        log.append(EventKind.RUN_STARTED, op="moe_router")
        assert mode(log.events_path) == 0o640
        log.write_json("summary.json", {"op": "moe_router"})
        assert mode(log.folder / "summary.json") == 0o640
        kept = tmp_path / "kept.json"
        kept.write_text("{}")
        kept.chmod(0o604)
        atomic_write_text(kept, '{"a": 1}')
        assert mode(kept) == 0o604 and kept.read_text() == '{"a": 1}'
        os.umask(0o022)
        atomic_write_text(tmp_path / "other.json", "{}")
        assert mode(tmp_path / "other.json") == 0o644
    finally:
        os.umask(old)
    assert not list(tmp_path.rglob("*.tmp"))
