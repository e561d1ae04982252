"""Section 5: bad input to every verb of the real `harness` CLI, in subprocesses.

The verbs are collected from the typer app (harness.cli.app), so a new verb is covered
by the generic cases (unknown option, unknown op) without editing this file; verbs with
more specific failure modes get extra cases below. Each case must end with a non-zero
exit, exactly one non-empty line on stderr that starts with "harness: error" (no
traceback), and no file left in the project root that was not there before."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def verbs() -> list[str]:
    """Every command name of the typer app (groups as 'group sub')."""
    import typer.main

    from ..cli import app

    click_app = typer.main.get_command(app)
    out: list[str] = []

    def walk(cmd, prefix: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                walk(sub, prefix + [name])
        elif prefix:
            out.append(" ".join(prefix))

    walk(click_app, [])
    return out


def _params(verb: str) -> set[str]:
    import typer.main

    from ..cli import app

    cmd = typer.main.get_command(app)
    for part in verb.split():
        cmd = cmd.commands[part]     # type: ignore[attr-defined]
    return {o for p in cmd.params for o in getattr(p, "opts", [])}


def cases(root: Path, all_cases: bool = True) -> list[tuple[str, list[str], dict[str, str]]]:
    """(label, argv, extra env) for every verb (all_cases False: one generic case per verb
    plus one of each specific kind)."""
    bad_cand = root / "kernels_generated" / "silu_and_mul" / "malformed"
    out: list[tuple[str, list[str], dict[str, str]]] = []
    for v in verbs():
        argv = v.split()
        opts = _params(v)
        out.append((f"{v}: unknown option", argv + ["--no-such-option-xyz"], {}))
        if "--op" in opts:
            out.append((f"{v}: unknown op", argv + ["--op", "no_such_op"], {}))
            if "--candidate" in opts:
                out.append((f"{v}: unknown candidate", argv + ["--op", "silu_and_mul", "--candidate", "ffffffffffff"], {}))
                out.append((f"{v}: malformed candidate folder", argv + ["--op", "silu_and_mul", "--candidate", str(bad_cand)], {}))
            if "--batch" in opts:
                out.append((f"{v}: batch out of range", argv + ["--op", "silu_and_mul", "--batch", "999"], {}))
    out += [
        ("optimize: no API key", ["optimize", "--op", "silu_and_mul", "--agent", "openai:gpt-x"],
         {"OPENAI_API_KEY": "", "HARNESS_LLM_API_KEY": ""}),
        ("optimize: bad agent", ["optimize", "--op", "silu_and_mul", "--agent", "nonsense"], {}),
        ("optimize: resume unknown run", ["optimize", "--op", "silu_and_mul", "--resume", "no-such-run"], {}),
    ]
    if not all_cases:
        seen: set[str] = set()
        keep = []
        for c in out:
            kind = c[0].split(": ", 1)[1]
            if kind == "unknown option" or kind not in seen:
                keep.append(c)
                seen.add(kind)
        out = keep
    return out


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def prepare_root(root: Path) -> None:
    """A project root with one malformed candidate folder and one corrupt evidence file."""
    from .. import paths

    bad = root / "kernels_generated" / "silu_and_mul" / "malformed"
    bad.mkdir(parents=True, exist_ok=True)
    (bad / "kernel.py").write_text("def compile(:\n")
    (bad / "candidate.json").write_text('{"op": "silu_and_mul", "id": ')
    ev = root / "kernels_generated" / "silu_and_mul" / "0123456789ab" / "evidence"
    ev.mkdir(parents=True, exist_ok=True)
    (ev / "20260101T000000Z-host.json").write_text('{"op": "silu_and_mul", "verdict": "pa')
    if not (root / "prompts").exists():
        import shutil

        shutil.copytree(paths.REPO_ROOT / "prompts", root / "prompts")


def run_one(label: str, argv: list[str], env_extra: dict[str, str], root: Path, timeout_s: float) -> dict[str, Any]:
    env = {**os.environ, "HARNESS_ROOT": str(root), "CUDA_VISIBLE_DEVICES": "", **env_extra}
    env = {k: v for k, v in env.items() if v != ""}
    try:
        r = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True,
                           timeout=timeout_s, env=env, cwd=str(root))
        code, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired:
        code, err = None, "timed out"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    one_line = len(lines) == 1 and lines[0].startswith("harness: error") and "Traceback" not in err
    return {"case": label, "argv": argv, "exit": code, "stderr_lines": len(lines),
            "first_line": lines[0][:160] if lines else "", "one_line": one_line,
            "ok": code not in (0, None) and one_line}


def run_cli_inputs(root: Path, workers: int = 2, timeout_s: float = 120.0, all_cases: bool = True) -> list[dict[str, Any]]:
    prepare_root(root)
    todo = cases(root, all_cases)
    before = _snapshot(root)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(lambda c: run_one(c[0], c[1], c[2], root=root, timeout_s=timeout_s), todo))
    new = sorted(_snapshot(root) - before)
    for row in rows:
        row["files_left"] = new
    return rows


if __name__ == "__main__":
    print(json.dumps(verbs()))
