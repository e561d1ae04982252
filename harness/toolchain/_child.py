"""The sandboxed child: `python -m harness.toolchain._child <result-fd>`.

Reads {"key", "job"} from stdin BEFORE importing any candidate code, then runs the job
and writes one HMAC-signed JSON line to the result fd (see sandbox.py). Jobs:
  compile   import kernel.py with CUTE_DSL_ARCH set, call its compile(tp, options, **static)
  evaluate  compile for this GPU, then correctness (and timing) at points (gpu_eval.py)
  canary    a tiny known-good GPU op: is the GPU healthy after a CUDA error?
"""
from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
import resource
import sys
import time
import traceback
from types import ModuleType
from typing import Any, Callable

from .diagnostics import trim_traceback


def load_kernel_module(path: str) -> ModuleType:
    """Import kernel.py from its file (the DSL reads the source file, so never exec a string)."""
    spec = importlib.util.spec_from_file_location("candidate_kernel", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["candidate_kernel"] = mod
    spec.loader.exec_module(mod)
    return mod


def compile_kernel(job: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Import and compile; returns (compiled, payload). payload["verdict"] != "OK" on failure."""
    path = job["kernel_path"]
    t0 = time.perf_counter()
    try:
        mod = load_kernel_module(path)
    except BaseException as exc:  # noqa: BLE001 - any failure of candidate code is its verdict
        return None, {"verdict": "COMPILE_ERROR", "stage": "import",
                      "message": f"import failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300],
                      "diagnostics": trim_traceback(exc, path)}
    t1 = time.perf_counter()
    try:
        compiled = mod.compile(int(job["tp"]), job["options"], **job.get("static", {}))
    except BaseException as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, {"verdict": "COMPILE_ERROR", "stage": "compile", "import_s": t1 - t0,
                      "message": f"compile() raised {type(exc).__name__}: {first}"[:300],
                      "diagnostics": trim_traceback(exc, path)}
    t2 = time.perf_counter()
    if compiled is None or not callable(compiled):
        return None, {"verdict": "COMPILE_ERROR", "stage": "compile", "import_s": t1 - t0, "compile_s": t2 - t1,
                      "message": f"compile() returned {type(compiled).__name__}, not a compiled function",
                      "diagnostics": ""}
    return compiled, {"verdict": "OK", "import_s": t1 - t0, "compile_s": t2 - t1,
                      "compiled_type": type(compiled).__name__, "message": "compiled"}


def _job_compile(job: dict[str, Any]) -> dict[str, Any]:
    os.environ["CUTE_DSL_ARCH"] = job["arch"]          # read once, when cutlass is imported
    os.environ["CUTE_DSL_KEEP"] = "ptx"                # SASS would need nvdisasm
    os.environ["CUTE_DSL_DUMP_DIR"] = job["dump_dir"]
    os.makedirs(job["dump_dir"], exist_ok=True)
    _, payload = compile_kernel(job)
    try:
        import cutlass

        payload["cutlass_version"] = getattr(cutlass, "__version__", "?")
    except ImportError:
        pass
    return payload


def _job_evaluate(job: dict[str, Any]) -> dict[str, Any]:
    from .gpu_eval import run_evaluate

    return run_evaluate(job, compile_kernel)


def _job_canary(job: dict[str, Any]) -> dict[str, Any]:
    from .gpu_eval import run_canary

    return run_canary(job)


JOBS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "compile": _job_compile, "evaluate": _job_evaluate, "canary": _job_canary,
}


def main() -> None:
    w_fd = int(sys.argv[1])
    raw = sys.stdin.buffer.read()
    sys.stdin.close()
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a segfault leaves no core file
    except (ValueError, OSError):
        pass
    msg = json.loads(raw)
    chan = os.fdopen(w_fd, "wb", buffering=0)
    send = _signer(bytes.fromhex(msg["key"]), chan)
    job = msg["job"]
    del msg, raw
    try:
        payload = JOBS[job["kind"]](job)
    except BaseException as exc:  # noqa: BLE001 - report, never hang
        payload = {"verdict": "CRASH", "message": f"worker error: {type(exc).__name__}: {exc}"[:300],
                   "diagnostics": traceback.format_exc()[-4000:]}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    send(payload)
    chan.close()
    os._exit(0)                        # skip atexit hooks and library teardown


def _signer(key: bytes, chan) -> Callable[[dict[str, Any]], None]:
    def send(payload: dict[str, Any]) -> None:
        body = json.dumps(payload, default=str)
        mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        chan.write((json.dumps({"payload": body, "mac": mac}) + "\n").encode())
    return send


if __name__ == "__main__":
    main()
