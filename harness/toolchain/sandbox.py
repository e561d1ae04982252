"""Run one job (compile, evaluate, canary) in a fresh child process that candidate code
cannot use to take the harness down or to forge its result.

- A new process per job (`python -m harness.toolchain._child`), in its own session and
  process group (start_new_session = setsid): at the deadline, and after every job, the
  whole group is killed with SIGKILL, so children a candidate forked die with it.
- Its environment has every variable whose name contains KEY, TOKEN, SECRET, PASSWORD or
  CREDENTIAL removed; core dumps are off.
- The result channel is a pipe whose write end the child inherits as an extra fd; the
  child's stdout and stderr are separate pipes the parent drains into capped buffers
  (first and last 32 KiB kept), so printing 10 MB neither blocks the child nor floods us.
- A per-job random key goes to the child on stdin, read before any candidate code is
  imported; the result is HMAC-signed with it. Bytes on stdout, or an unsigned/forged
  message on the result pipe, are never taken for a result (verdict CRASH).
  Limit: candidate code shares the worker's address space, so this relies on the static
  checks (no sys/gc/inspect, no dunder or getattr introspection) to keep the key out of reach.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..secrets import scrub, scrub_obj
from .verdict import Verdict

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
LOG_KEEP_BYTES = 32 * 1024            # head and tail of each of stdout / stderr
RESULT_MAX_BYTES = 64 * 2**20


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """os.environ minus secrets, plus `extra`; keeps PYTHONPATH so the harness imports."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class _CappedReader(threading.Thread):
    """Drains a pipe to EOF, keeping the first and last `keep` bytes and the total count."""

    def __init__(self, fd: int, keep: int, max_total: int | None = None) -> None:
        super().__init__(daemon=True)
        self.fd, self.keep, self.max_total = fd, keep, max_total
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def run(self) -> None:
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                self.total += len(chunk)
                self._keep(chunk)
        except OSError:
            pass
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def _keep(self, chunk: bytes) -> None:
        if len(self.head) < self.keep:
            take = self.keep - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def text(self) -> str:
        mid = f"\n... [{self.total - len(self.head) - len(self.tail)} bytes cut] ...\n" \
            if self.total > len(self.head) + len(self.tail) else ""
        return self.head.decode(errors="replace") + mid + self.tail.decode(errors="replace")


class _WholeReader(_CappedReader):
    """Keeps everything up to max_total bytes (the result channel)."""

    def _keep(self, chunk: bytes) -> None:
        if self.total <= (self.max_total or RESULT_MAX_BYTES):
            self.head += chunk


@dataclass
class SandboxResult:
    verdict: Verdict                   # the child's own verdict if it returned one, else CRASH/TIMEOUT
    result: dict[str, Any] | None      # the signed payload the child returned
    message: str                       # one line: why, for people and agents
    exit_code: int | None              # None when killed at the deadline
    signal_name: str | None
    timed_out: bool
    wall_s: float
    stdout: str = field(repr=False, default="")
    stderr: str = field(repr=False, default="")
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    pgid: int = 0                      # the killed process group (tests check it is empty)


def _sign(key: bytes, payload: bytes) -> str:
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def group_alive(pgid: int) -> bool:
    """True if any process of group `pgid` still exists (zombies of ours excepted)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds on zombies too; look for live members in /proc where possible.
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for p in proc.iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = (p / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def run_job(job: dict[str, Any], timeout_s: float, env_extra: dict[str, str] | None = None,
            cwd: str | Path | None = None) -> SandboxResult:
    """Run `job` in a fresh sandboxed child (see module doc) and classify the outcome.
    Never raises for anything the child does; returns within timeout_s + a few seconds."""
    key = secrets.token_bytes(32)
    r_fd, w_fd = os.pipe()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.toolchain._child", str(w_fd)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        pass_fds=(w_fd,), start_new_session=True, env=scrubbed_env(env_extra),
        cwd=str(cwd) if cwd else None, close_fds=True)
    os.close(w_fd)
    pgid = proc.pid                    # setsid: the child leads its own group
    out = _CappedReader(os.dup(proc.stdout.fileno()), LOG_KEEP_BYTES)      # type: ignore[union-attr]
    err = _CappedReader(os.dup(proc.stderr.fileno()), LOG_KEEP_BYTES)      # type: ignore[union-attr]
    res = _WholeReader(r_fd, 0, RESULT_MAX_BYTES)
    proc.stdout.close()                                                    # type: ignore[union-attr]
    proc.stderr.close()                                                    # type: ignore[union-attr]
    for t in (out, err, res):
        t.start()
    timed_out = False
    try:
        proc.stdin.write(json.dumps({"key": key.hex(), "job": job}).encode())   # type: ignore[union-attr]
        proc.stdin.close()                                                      # type: ignore[union-attr]
    except (BrokenPipeError, OSError):
        pass
    try:
        proc.wait(timeout=max(0.0, timeout_s - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
    # Always kill the whole group: the deadline passed, or the job finished and anything
    # it forked is an orphan.
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    # SIGKILL is delivered asynchronously: wait (briefly) until every member of the group
    # is gone, so a caller never sees a survivor of a job that has returned.
    settle = time.monotonic() + 2.0
    while group_alive(pgid) and time.monotonic() < settle:
        time.sleep(0.01)
    wall_s = time.monotonic() - t0
    for t in (out, err, res):
        t.join(timeout=2.0)            # a grandchild that escaped the group may hold a pipe
    code = proc.returncode
    sig = signal.Signals(-code).name if code is not None and code < 0 else None
    # The child had no secrets in its environment, but it can read its parent's
    # (/proc/<ppid>/environ): everything it says passes through the scrubber.
    base: dict[str, Any] = dict(exit_code=None if timed_out else code, signal_name=None if timed_out else sig,
                timed_out=timed_out, wall_s=wall_s, stdout=scrub(out.text()), stderr=scrub(err.text()),
                stdout_bytes=out.total, stderr_bytes=err.total, pgid=pgid)
    if timed_out:
        return SandboxResult(Verdict.TIMEOUT, None, f"no result within the {timeout_s:g} s deadline; "
                             "process group killed", **base)
    payload = _verify(bytes(res.head), key)
    if payload is None:
        why = f"killed by {sig}" if sig else f"exited with code {code}"
        forged = " (an unsigned or forged result was refused)" if res.total else ""
        return SandboxResult(Verdict.CRASH, None, f"worker {why} without a result{forged}", **base)
    try:
        verdict = Verdict(payload.get("verdict"))
    except ValueError:
        return SandboxResult(Verdict.CRASH, None, "worker returned an unknown verdict", **base)
    payload = scrub_obj(payload)
    return SandboxResult(verdict, payload, str(payload.get("message", "")), **base)


def _verify(raw: bytes, key: bytes) -> dict[str, Any] | None:
    """The last signed line on the result channel, or None."""
    for line in reversed(raw.splitlines()):
        try:
            msg = json.loads(line)
            body = msg["payload"].encode()
            if hmac.compare_digest(_sign(key, body), str(msg["mac"])):
                out = json.loads(body)
                return out if isinstance(out, dict) else None
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return None
