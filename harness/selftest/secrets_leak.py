"""Section 4: a canary API key in the environment must appear nowhere the harness writes.

1. A candidate that dumps os.environ and every readable /proc/*/environ (the parent
   harness's included) to stdout/stderr and into its exception, compiled through the
   toolchain (compile_candidate: sandbox, diagnostics, compile cache).
2. The agent loop with OPENAI_LOG=debug (the SDK logs its HTTP traffic) against the local
   server (llm_faults.run_loop_storm), its stderr captured.
Then every file under the project root (runs/, kernels_generated/ with evidence, the
dashboard output if a dashboard was built) and the compile cache is scanned for the key."""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

DUMPER = '''import os, sys
found = [f"{k}={v}" for k, v in os.environ.items() if "KEY" in k]
pids = [str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]
for pid in pids:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            found += [e for e in f.read().decode(errors="replace").split("\\0") if "KEY=" in e]
    except OSError:
        pass
dump = " ".join(sorted(set(found)))
sys.stdout.write(dump + "\\n")
sys.stderr.write(dump + "\\n")
sys.stderr.flush()
sys.stdout.flush()
if "{mode}" == "crash":
    os._exit(1)
raise ValueError(dump)


def compile(tp, options, **static):
    return None


def launch(compiled, **t):
    pass
'''


def canary_key() -> str:
    return "sk-selftest-canary-" + secrets.token_hex(16)


def count_in_tree(root: Path, needle: str) -> tuple[int, list[str]]:
    n, where = 0, []
    b = needle.encode()
    for p in root.rglob("*"):
        try:
            if p.is_file():
                k = p.read_bytes().count(b)
                if k:
                    n += k
                    where.append(str(p.relative_to(root)))
        except OSError:
            continue
    return n, where


def run_dumpers(root: Path, cache: Path, key: str) -> dict[str, Any]:
    """Compile the env-dumping candidates (COMPILE_ERROR and CRASH flavours) with the key
    in this process's environment; return the reports' key counts."""
    from ..toolchain import Provenance, Scope, compile_candidate, create_candidate

    before = dict(os.environ)
    os.environ["OPENAI_API_KEY"] = key
    os.environ["ANTHROPIC_API_KEY"] = key
    out: dict[str, Any] = {"verdicts": []}
    try:
        leaks = 0
        for mode in ("raise", "crash"):
            src = DUMPER.replace("{mode}", mode)
            cand = create_candidate("silu_and_mul", src, Scope(archs=("sm_90a",), tp=(8,)), Provenance("human"),
                                    root=root / "kernels_generated")
            rep = compile_candidate(cand, "sm_90a", 8, cache_root=cache, use_cache=True)
            out["verdicts"].append(rep.verdict.value)
            import json

            leaks += json.dumps(rep.to_json()).count(key)
        out["report_leaks"] = leaks
    finally:
        os.environ.clear()
        os.environ.update(before)
    return out


def _helper_main(root: str, cache: str) -> None:
    """In a process whose initial environment holds the key (so /proc/<pid>/environ does)."""
    import json
    import sys

    out = run_dumpers(Path(root), Path(cache), os.environ["OPENAI_API_KEY"])
    sys.stdout.write("SELFTEST-JSON " + json.dumps(out) + "\n")


def run_dumpers_with_key_in_initial_env(root: Path, cache: Path, key: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """run_dumpers in a subprocess started with the key in its environment; its stdout,
    (what the harness would print) is counted too."""
    import json
    import subprocess
    import sys

    from .. import paths

    env = {**os.environ, "OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key, "PYTHONPATH": str(paths.REPO_ROOT)}
    r = subprocess.run([sys.executable, "-m", "harness.selftest.secrets_leak", str(root), str(cache)],
                       capture_output=True, text=True, timeout=timeout_s, env=env)
    for line in r.stdout.splitlines():
        if line.startswith("SELFTEST-JSON "):
            out = json.loads(line[len("SELFTEST-JSON "):])
            out["helper_output_leaks"] = (r.stdout + r.stderr).count(key)
            return out
    raise RuntimeError(f"secrets helper failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")


if __name__ == "__main__":
    import sys as _sys

    _helper_main(_sys.argv[1], _sys.argv[2])
