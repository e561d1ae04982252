"""Section 1: crashing and hanging candidates through the toolchain worker.

Each fault is a kernel.py generated here whose fault fires at import or inside compile()
(on a GPU also inside launch / on the device). They reach the worker unchecked on purpose:
they are sent straight to the sandbox (`harness.toolchain.sandbox.run_job`, the worker API
that evaluate_candidate and compile_candidate call AFTER the static checks), so the static
checks - which would refuse their `import os` / `ctypes` - never see them.

Per fault: the verdict must match (and, for crashes, the signal or exit code); the
fixture must have reached its fault (a marker line on stderr); the killed process group
must be empty and no process carrying this run's marker may survive (scanned in /proc);
then the honest candidate, evaluated right after on the same worker thread through the
full evaluate_candidate pipeline (static checks on, cache off), must still pass.
"""
from __future__ import annotations

import os
import secrets
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..toolchain.sandbox import group_alive, run_job
from ..toolchain.verdict import Verdict

MARK = "SELFTEST-REACHED"

# name -> (statements, verdict, signal name or exit code or None = any)
_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGKILL", "SIGTERM", "SIGQUIT", "SIGUSR1", "SIGHUP")
CRASHES: dict[str, tuple[str, Verdict, object]] = {
    "segv_ctypes_null_read": ("import ctypes; ctypes.string_at(0)", Verdict.CRASH, "SIGSEGV"),
    "abort": ("import os; os.abort()", Verdict.CRASH, "SIGABRT"),
    "alarm_signal": ("import signal, time; signal.alarm(1); time.sleep(30)", Verdict.CRASH, "SIGALRM"),
    "killpg_own_group": ("import os, signal; os.killpg(0, signal.SIGKILL)", Verdict.CRASH, "SIGKILL"),
    **{f"signal_{s[3:].lower()}": (f"import os, signal; os.kill(os.getpid(), signal.{s})", Verdict.CRASH, s)
       for s in _SIGNALS},
    **{f"os_exit_{c}": (f"import os; os._exit({c})", Verdict.CRASH, c) for c in (0, 1, 2, 3, 40, 77, 127, 255)},
    "forged_result_on_result_fd": (
        "import os, sys, json; os.write(int(sys.argv[1]), (json.dumps({'payload': json.dumps({'verdict': 'OK'}),"
        " 'mac': '0' * 64}) + '\\n').encode()); os._exit(0)", Verdict.CRASH, 0),
    "forged_result_on_stdout": (
        "import os, json; print(json.dumps({'payload': json.dumps({'verdict': 'OK'}), 'mac': '0' * 64}), flush=True);"
        " os._exit(0)", Verdict.CRASH, 0),
    "closes_result_fd": ("import os, sys; os.close(int(sys.argv[1])); os._exit(0)", Verdict.CRASH, 0),
    "stdout_flood_8mb_then_exit": ("import os; os.write(1, b'x' * (8 << 20)); os._exit(1)", Verdict.CRASH, 1),
    "grandchild_holds_pipes_child_exits": (
        "import os, sys\nif os.fork() == 0:\n    os.execv(sys.executable, [sys.executable, '-c', "
        "'import time; time.sleep(600)', '{orphan}'])\nos._exit(3)", Verdict.CRASH, 3),
    "raise_runtime_error": ("raise RuntimeError('selftest fault')", Verdict.COMPILE_ERROR, None),
    "raise_system_exit_0": ("raise SystemExit(0)", Verdict.COMPILE_ERROR, None),
    "raise_system_exit_7": ("import sys; sys.exit(7)", Verdict.COMPILE_ERROR, None),
    "raise_keyboard_interrupt": ("raise KeyboardInterrupt()", Verdict.COMPILE_ERROR, None),
    "sigint_to_self": ("import os, signal, time; os.kill(os.getpid(), signal.SIGINT); time.sleep(5)",
                       Verdict.COMPILE_ERROR, None),
    "raise_memory_error": ("raise MemoryError()", Verdict.COMPILE_ERROR, None),
    "python_recursion": ("f = lambda n: f(n + 1)\nf(0)", Verdict.COMPILE_ERROR, None),
    "zero_division": ("1 / 0", Verdict.COMPILE_ERROR, None),
    "import_missing_module": ("import selftest_no_such_module_xyz", Verdict.COMPILE_ERROR, None),
    "raise_10mb_message": ("raise ValueError('m' * (10 << 20))", Verdict.COMPILE_ERROR, None),
}
COMPILE_ONLY = {
    "compile_returns_none": ("return None", Verdict.COMPILE_ERROR, None),
    "compile_returns_a_string": ("return 'not a function'", Verdict.COMPILE_ERROR, None),
}
IMPORT_ONLY = {"syntax_error": ("def (:", Verdict.COMPILE_ERROR, None)}

HANGS: dict[str, str] = {
    "busy_loop": "while True:\n    pass",
    "sleep": "import time; time.sleep(3600)",
    "blocked_on_pipe_read": "import os; r, w = os.pipe(); os.read(r, 1)",
    "blocked_on_full_pipe_write": "import os; r, w = os.pipe(); os.write(w, b'x' * (16 << 20))",
    "lock_deadlock": "import threading; l = threading.Lock(); l.acquire(); l.acquire()",
    "select_forever": "import select; select.select([], [], [], 3600)",
    "signal_pause": "import signal; signal.pause()",
    "ignores_sigterm": "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    pass",
    "waits_on_grandchild_holding_pipes": (
        "import os, sys\npid = os.fork()\nif pid == 0:\n    os.execv(sys.executable, [sys.executable, '-c', "
        "'import time; time.sleep(600)', '{orphan}'])\nos.waitpid(pid, 0)"),
    "waits_on_subprocess": ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                            "'import time; time.sleep(600)', '{orphan}']).wait()"),
    "junk_on_result_fd_then_sleep": "import os, sys, time; os.write(int(sys.argv[1]), b'{\"verdict\": '); time.sleep(3600)",
}
STAGES = ("import", "compile")


@dataclass
class Fault:
    name: str
    stage: str                       # import | compile | launch | device
    source: str
    expected: Verdict
    expected_exit: object = None     # signal name, exit code, or None (any)
    hang: bool = False
    marked: bool = True              # False: the fault fires before the marker line can run


def _indent(code: str, pad: str) -> str:
    return "\n".join(pad + line for line in code.splitlines())


def _source(stage: str, code: str, name: str) -> str:
    reach = f"import sys as _s; _s.stderr.write('{MARK} {name}\\n'); _s.stderr.flush()"
    if stage == "import":
        return f"{reach}\n{code}\n\ndef compile(tp, options, **static):\n    return None\n\n\ndef launch(compiled, **t):\n    pass\n"
    return (f"def compile(tp, options, **static):\n{_indent(reach, '    ')}\n{_indent(code, '    ')}\n\n\n"
            "def launch(compiled, **t):\n    pass\n")


def cpu_faults(token: str) -> tuple[list[Fault], list[Fault]]:
    """Every CPU-stage crash and hang fixture; `{orphan}` in a source is replaced by a
    per-fault marker when it runs (grandchildren carry it in their argv)."""
    del token
    crashes, hangs = [], []
    for stage in STAGES:
        table = {**CRASHES, **(COMPILE_ONLY if stage == "compile" else IMPORT_ONLY)}
        for name, (code, verdict, exit_) in table.items():
            crashes.append(Fault(f"{stage}:{name}", stage, _source(stage, code, name), verdict, exit_,
                                 marked=name != "syntax_error"))
        for name, code in HANGS.items():
            hangs.append(Fault(f"{stage}:{name}", stage, _source(stage, code, name), Verdict.TIMEOUT, None, True))
    return crashes, hangs


def orphan_marker(token: str, fault_name: str) -> str:
    return f"SELFTEST-ORPHAN-{token}-{fault_name.replace(':', '__')}"


def marked_processes(marker: str) -> list[int]:
    """Pids of live processes whose command line carries `marker`."""
    needle = marker.encode()
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if needle in (p / "cmdline").read_bytes():
                st = (p / "stat").read_text()
                if st[st.rfind(")") + 2:].split()[0] != "Z":
                    out.append(int(p.name))
        except OSError:
            continue
    return out


@dataclass
class FaultOutcome:
    name: str
    stage: str
    expected: str
    verdict: str
    exit: object
    ok: bool
    reached: bool | None             # None: the fault fires before any line runs (syntax error)
    orphans: int
    kill_latency_s: float | None     # hangs: process-group kill done, past the deadline
    return_latency_s: float | None   # hangs: run_job returned, past the deadline
    wall_s: float
    cascade_ok: bool | None
    message: str


def run_fault(f: Fault, folder: Path, token: str, timeout_s: float) -> FaultOutcome:
    path = folder / f"{f.name.replace(':', '__')}.py"
    marker = orphan_marker(token, f.name)
    path.write_text(f.source.replace("{orphan}", marker))
    dump = folder / "dump"
    dump.mkdir(exist_ok=True)
    job = {"kind": "compile", "kernel_path": str(path), "arch": "sm_90a", "tp": 8, "static": {},
           "options": "--enable-tvm-ffi", "dump_dir": str(dump)}
    t0 = time.monotonic()
    sb = run_job(job, timeout_s, cwd=folder)
    returned_s = time.monotonic() - t0
    exit_: object = sb.signal_name or sb.exit_code
    ok = sb.verdict is f.expected and (f.expected_exit is None or exit_ == f.expected_exit)
    time.sleep(0.05)
    left = marked_processes(marker)
    in_group = group_alive(sb.pgid)
    for pid in left:                  # escaped processes this fixture started: end them by id
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return FaultOutcome(f.name, f.stage, f.expected.value, sb.verdict.value, exit_, ok,
                        (f"{MARK} {f.name.split(':', 1)[1]}" in sb.stderr) if f.marked else None, len(left) + int(in_group),
                        sb.wall_s - timeout_s if f.hang else None, returned_s - timeout_s if f.hang else None,
                        sb.wall_s, None, sb.message[:200])


def honest_source() -> str:
    from .. import paths

    return (paths.REPO_ROOT / "tests" / "fixtures" / "cheats" / "honest.py").read_text()


def make_cascade_check(root: Path) -> Callable[[], tuple[bool, str]]:
    """The honest candidate through the whole pipeline (static on, compile cache off):
    OK on a GPU; on a CPU every compile OK and the GPU stage NOT_RUN."""
    from ..opdef import Point
    from ..toolchain import Provenance, Scope, create_candidate, evaluate_candidate

    cand = create_candidate("silu_and_mul", honest_source(), Scope(archs=("sm_90a",), tp=(8,)),
                            Provenance("human"), root=root)

    def check() -> tuple[bool, str]:
        rep = evaluate_candidate(cand, [Point(batch=4, tp=8)], archs=["sm_90a"], use_cache=False,
                                 time_it=False, n_input_sets=2, compile_timeout_s=300.0, timeout_s=300.0)
        good = rep.verdict is Verdict.OK or (rep.verdict is Verdict.NOT_RUN and not rep.gpu_run
                                             and rep.static.ok and all(c.ok for c in rep.compiles))
        return good, f"{rep.verdict.value}: {rep.message}"[:200]

    return check


def startup_s() -> float:
    """Seconds a worker needs to reach candidate code (it imports torch first)."""
    with tempfile.TemporaryDirectory(prefix="selftest-probe-") as d:
        f = Fault("probe:raise", "import", _source("import", "raise RuntimeError('probe')", "raise"),
                  Verdict.COMPILE_ERROR)
        t0 = time.monotonic()
        run_fault(f, Path(d), "probe", 120.0)
        return time.monotonic() - t0


def run_faults(faults: list[Fault], timeout_s: float, workers: int, token: str,
               cascade: Callable[[], tuple[bool, str]] | None, on_done: Callable[[FaultOutcome], None]) -> list[FaultOutcome]:
    """Run each fault (and the cascade check after it, on the same thread)."""
    folder = Path(tempfile.mkdtemp(prefix="selftest-faults-"))
    lock = threading.Lock()
    out: list[FaultOutcome] = []

    def one(f: Fault) -> FaultOutcome:
        o = run_fault(f, folder, token, timeout_s)
        if cascade is not None:
            o.cascade_ok, why = cascade()
            if not o.cascade_ok:
                o.message += f" | cascade: {why}"
        with lock:
            out.append(o)
            on_done(o)
        return o

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, faults))
    return sorted(out, key=lambda o: o.name)


def percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def new_token() -> str:
    return secrets.token_hex(4)
