"""Run one GPU gate in a fresh, sandboxed process: a hanging or crashing kernel becomes a
failed gate, not a hung or dead harness.

The child is `python -m gates._isolated <result-fd>` in its own session / process group,
with the toolchain's scrubbed environment (no secrets) and capped log pipes. It reads
{"key", "job"} from stdin before importing any candidate code, runs `gates.<gate>.run(ctx)`
(or, for tests, a `module:function` target) and returns the GateResult on a separate pipe,
HMAC-signed with the per-job key (the toolchain's sandbox protocol, harness/toolchain/
sandbox.py). At the deadline, and after every job, the whole group is SIGKILLed.
"""
from __future__ import annotations

import importlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Any

from . import GateContext, GateResult, Verdict


def ctx_to_json(ctx: GateContext) -> dict[str, Any]:
    return {"op": ctx.op, "candidate_id": ctx.candidate_id, "root": str(ctx.root), "base": ctx.base,
            "device": ctx.device, "model_config": ctx.model_config, "config_sha256": ctx.config.sha256}


def ctx_from_json(d: dict[str, Any]) -> GateContext:
    from pathlib import Path

    from .config import GateConfig, config_path

    root = Path(d["root"])
    config = GateConfig.from_bytes(config_path(root).read_bytes())
    if config.sha256 != d["config_sha256"]:
        raise RuntimeError("the gate config changed between the parent and the worker")
    return GateContext(op=d["op"], candidate_id=d["candidate_id"], root=root, config=config, base=d["base"],
                       device=d["device"], model_config=d["model_config"])


def run_isolated(gate: str, ctx: GateContext, timeout_s: float, target: str | None = None) -> GateResult:
    """`gates.<gate>.run(ctx)` in a sandboxed child; FAIL on a timeout, crash or forged result."""
    from harness.toolchain.sandbox import LOG_KEEP_BYTES, RESULT_MAX_BYTES, _CappedReader, _verify, \
        _WholeReader, scrubbed_env

    key = secrets.token_bytes(32)
    job = {"gate": gate, "target": target or f"gates.{gate}:run", "ctx": ctx_to_json(ctx)}
    r_fd, w_fd = os.pipe()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gates._isolated", str(w_fd)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(w_fd,),
                            start_new_session=True, env=scrubbed_env(), cwd=str(ctx.root), close_fds=True)
    os.close(w_fd)
    readers = [_CappedReader(os.dup(proc.stdout.fileno()), LOG_KEEP_BYTES),      # type: ignore[union-attr]
               _CappedReader(os.dup(proc.stderr.fileno()), LOG_KEEP_BYTES),      # type: ignore[union-attr]
               _WholeReader(r_fd, 0, RESULT_MAX_BYTES)]
    proc.stdout.close()                                                           # type: ignore[union-attr]
    proc.stderr.close()                                                           # type: ignore[union-attr]
    for t in readers:
        t.start()
    try:
        proc.stdin.write(json.dumps({"key": key.hex(), "job": job}).encode())     # type: ignore[union-attr]
        proc.stdin.close()                                                        # type: ignore[union-attr]
    except (BrokenPipeError, OSError):
        pass
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)       # the group: anything the kernel forked dies too
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for t in readers:
        t.join(timeout=2.0)
    wall_s = round(time.monotonic() - t0, 3)
    tail = readers[1].text()[-2000:]
    sandbox = {"isolated": True, "wall_s": wall_s, "exit_code": proc.returncode, "timeout_s": timeout_s}
    if timed_out:
        return GateResult(gate, Verdict.FAIL, [f"no result within the {timeout_s:g} s deadline (hang): "
                                               "worker process group killed"], {"sandbox": sandbox, "stderr_tail": tail})
    payload = _verify(bytes(readers[2].head), key)
    if payload is None:
        code = proc.returncode
        why = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with code {code}"
        return GateResult(gate, Verdict.FAIL, [f"worker {why} without a result (crash)"],
                          {"sandbox": sandbox, "stderr_tail": tail})
    try:
        res = GateResult(gate, Verdict(payload["verdict"]), [str(r) for r in payload.get("reasons", [])],
                         dict(payload.get("numbers", {})))
    except (KeyError, ValueError, TypeError):
        return GateResult(gate, Verdict.FAIL, ["worker returned a malformed result"], {"sandbox": sandbox})
    res.numbers["sandbox"] = sandbox
    return res


def _main() -> None:
    import hashlib
    import hmac

    w_fd = int(sys.argv[1])
    raw = sys.stdin.buffer.read()
    sys.stdin.close()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    msg = json.loads(raw)
    key, job = bytes.fromhex(msg["key"]), msg["job"]
    del msg, raw
    chan = os.fdopen(w_fd, "wb", buffering=0)
    try:
        mod_name, _, fn_name = job["target"].partition(":")
        fn = getattr(importlib.import_module(mod_name), fn_name)
        res = fn(ctx_from_json(job["ctx"]))
        payload = res.to_dict()
    except BaseException as exc:  # noqa: BLE001 - the gate's fault becomes its recorded verdict
        payload = {"gate": job.get("gate"), "verdict": Verdict.ERROR.value,
                   "reasons": [f"{type(exc).__name__}: {str(exc)[:300]}"], "numbers": {}}
    body = json.dumps(payload, default=str, allow_nan=True)
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    chan.write((json.dumps({"payload": body, "mac": mac}) + "\n").encode())
    chan.close()
    os._exit(0)


if __name__ == "__main__":
    _main()
