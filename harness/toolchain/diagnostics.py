"""Compiler and runtime messages trimmed for people and agents: no ANSI colours, the frames
that point into the candidate's kernel.py, the DSL's own error text, at most ~60 lines."""
from __future__ import annotations

import re
import traceback

ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_LINES = 60
MAX_CHARS = 6000


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def trim_text(text: str, max_lines: int = MAX_LINES, max_chars: int = MAX_CHARS) -> str:
    lines = [ln.rstrip() for ln in strip_ansi(text).splitlines()]
    out: list[str] = []
    for ln in lines:                   # collapse runs of blank lines
        if ln or (out and out[-1]):
            out.append(ln)
    if len(out) > max_lines:
        half = max_lines // 2
        out = out[:half] + [f"... [{len(out) - max_lines} lines cut] ..."] + out[-half:]
    s = "\n".join(out)
    return s if len(s) <= max_chars else s[: max_chars // 2] + "\n...\n" + s[-max_chars // 2:]


def trim_traceback(exc: BaseException, kernel_path: str) -> str:
    """The exception's message plus only the stack frames inside kernel.py."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == kernel_path]
    parts = [f"kernel.py line {f.lineno}, in {f.name}: {f.line}" for f in frames[-6:]]
    msg = "".join(traceback.format_exception_only(type(exc), exc))
    return trim_text("\n".join(parts + [msg]))


_PTXAS_ENTRY = re.compile(r"Compiling entry function '?([^' ]+) ?'? for '(\w+)'")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def parse_ptxas(text: str) -> list[dict]:
    """ptxas -v / remarks{ptx} output -> [{kernel, arch, registers, stack_bytes, spill_store_bytes, spill_load_bytes}]."""
    out: list[dict] = []
    cur: dict | None = None
    # the DSL's remark printer wraps lines: rejoin everything, then split at "ptxas"
    flat = re.sub(r"\s+", " ", strip_ansi(text).replace("remark:", " "))
    for ln in re.split(r"(?=ptxas)", flat):
        m = _PTXAS_ENTRY.search(ln)
        if m:
            cur = {"kernel": m.group(1), "arch": m.group(2), "registers": None, "stack_bytes": 0,
                   "spill_store_bytes": 0, "spill_load_bytes": 0}
            out.append(cur)
            continue
        if cur is None:
            continue
        m = _PTXAS_SPILL.search(ln)
        if m:
            cur["stack_bytes"], cur["spill_store_bytes"], cur["spill_load_bytes"] = map(int, m.groups())
        m = _PTXAS_REGS.search(ln)
        if m:
            cur["registers"] = int(m.group(1))
    return out


_LD_GLOBAL = re.compile(r"\bld\.global(?:\.[\w:]+)*")


def ptx_global_loads(ptx: str) -> dict[str, int]:
    """Count global loads in PTX by vector width in bits (e.g. {"32": 4, "128": 12}).
    A 128-bit load is ld.global[.nc].v4.b32/f32/u32, .v2.b64/f64/u64, or .v8.{b16,f16,bf16}."""
    counts: dict[str, int] = {}
    for m in _LD_GLOBAL.finditer(ptx):
        mods = m.group(0).split(".")[2:]
        vec = next((int(x[1:]) for x in mods if re.fullmatch(r"v\d+", x)), 1)
        ty = next((x for x in reversed(mods) if re.fullmatch(r"[bsuf]\d+|bf16|pred", x)), "b32")
        bits_el = int(re.sub(r"\D", "", ty) or 32) if ty != "bf16" else 16
        width = str(vec * bits_el)
        counts[width] = counts.get(width, 0) + 1
    return counts
