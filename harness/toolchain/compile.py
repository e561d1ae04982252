"""`compile`: build a candidate for one (arch, TP, static key) in a sandboxed child, with a
persistent cache; report diagnostics, registers, spills and the share of 128-bit loads.

Cache key = sha256(kernel.py hash, cutlass version, arch, TP, static key, options, this
module's REPORT_VERSION). A hit reads one small JSON file (milliseconds). Deterministic
outcomes are cached (OK and COMPILE_ERROR); CRASH and TIMEOUT are not.
Register and spill counts come from ptxas (`remarks{ptx}` in the options, or
/usr/local/bin/ptxas -v on the kept PTX); vector widths come from the PTX, because SASS
dumping needs nvdisasm, which the CPU machines lack.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .. import paths
from ..hardware import TARGET_ARCHS
from ..opdef import OpDefinition, Point
from .candidate import Candidate, canonical_json
from .diagnostics import parse_ptxas, ptx_global_loads, trim_text
from .sandbox import run_job
from .verdict import Verdict

REPORT_VERSION = 1
DEFAULT_TIMEOUT_S = 300.0
# --enable-tvm-ffi: the call path the harness launches through (torch tensors, current stream);
# remarks{ptx}: ptxas prints registers / spills / barriers per kernel.
COMPILE_OPTIONS = "--enable-tvm-ffi remarks{ptx}"


@dataclass
class KernelResources:
    kernel: str
    registers: int | None
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int


@dataclass
class CompileReport:
    op: str
    candidate_id: str
    arch: str
    tp: int
    static: dict[str, Any]
    verdict: Verdict                   # OK, COMPILE_ERROR, CRASH or TIMEOUT
    message: str                       # one line
    diagnostics: str = ""              # trimmed compiler / traceback text
    compile_s: float = 0.0             # inside the child: candidate's compile() only
    wall_s: float = 0.0                # this call, process start included (a cache hit: the lookup)
    cache_hit: bool = False
    cache_key: str = ""
    cutlass_version: str = ""
    kernels: list[KernelResources] = field(default_factory=list)
    max_registers: int | None = None
    spill_bytes: int = 0               # stores + loads over all kernels
    global_loads_by_bits: dict[str, int] = field(default_factory=dict)
    global_load_128b_share: float | None = None
    ptx_lines: int = 0
    sass_available: bool = False       # nvdisasm is absent: vector widths are read from PTX
    stdout_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CompileReport":
        d = dict(d)
        d["verdict"] = Verdict(d["verdict"])
        d["kernels"] = [KernelResources(**k) for k in d.get("kernels", [])]
        return cls(**d)


@lru_cache(maxsize=1)
def cutlass_version() -> str:
    """The installed nvidia-cutlass-dsl version, without importing cutlass (slow)."""
    from importlib import metadata

    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        return "unknown"


def cache_key(source_hash: str, arch: str, tp: int, static: dict[str, Any], options: str = COMPILE_OPTIONS) -> str:
    blob = canonical_json({"src": source_hash, "cutlass": cutlass_version(), "arch": arch, "tp": tp,
                           "static": static, "options": options, "v": REPORT_VERSION})
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _cache_file(key: str, cache_root: Path | None) -> Path:
    return (cache_root or paths.cache_dir()) / "compile" / key[:2] / f"{key}.json"


def static_keys(defn: OpDefinition, cand: Candidate) -> list[dict[str, Any]]:
    """The static keys beyond TP a candidate must compile for: one per state dtype (ops
    with several) and per named shape its scope lists; [{}] for most ops."""
    axes: list[list[tuple[str, Any]]] = []
    if len(defn.state_dtypes) > 1:
        axes.append([("state_dtype", s) for s in (cand.scope.state_dtypes or defn.state_dtypes)])
    if cand.scope.shapes:
        axes.append([("shape", s) for s in cand.scope.shapes])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def static_for_point(defn: OpDefinition, point: Point) -> dict[str, Any]:
    """The static key (beyond TP) a point needs: what compile(**static) receives."""
    s: dict[str, Any] = {}
    if len(defn.state_dtypes) > 1:
        s["state_dtype"] = point.state_dtype
    if point.shape:
        s["shape"] = point.shape
    return s


def compile_candidate(cand: Candidate, arch: str, tp: int, static: dict[str, Any] | None = None, *,
                      timeout_s: float = DEFAULT_TIMEOUT_S, use_cache: bool = True,
                      cache_root: Path | None = None) -> CompileReport:
    """Compile `cand` for one arch / TP / static key in a sandboxed child (or read the cache).
    Never raises for the candidate's faults: they are the report's verdict."""
    static = dict(static or {})
    t0 = time.perf_counter()
    key = cache_key(cand.source_hash, arch, tp, static)
    cfile = _cache_file(key, cache_root)
    if use_cache and cfile.is_file():
        try:
            rep = CompileReport.from_json(json.loads(cfile.read_text()))
            rep.cache_hit, rep.wall_s = True, time.perf_counter() - t0
            return rep
        except (ValueError, TypeError, KeyError):
            pass                       # a stale or torn entry: recompile
    dump = Path(tempfile.mkdtemp(prefix="k3-compile-"))
    try:
        job = {"kind": "compile", "kernel_path": str(cand.kernel_path), "arch": arch, "tp": tp,
               "static": static, "options": COMPILE_OPTIONS, "dump_dir": str(dump)}
        sb = run_job(job, timeout_s, cwd=dump)
        p = sb.result or {}
        rep = CompileReport(op=cand.op, candidate_id=cand.id, arch=arch, tp=tp, static=static,
                            verdict=sb.verdict, message=sb.message, diagnostics=p.get("diagnostics", ""),
                            compile_s=float(p.get("compile_s", 0.0)), cache_key=key,
                            cutlass_version=str(p.get("cutlass_version", cutlass_version())),
                            stdout_bytes=sb.stdout_bytes + sb.stderr_bytes)
        if sb.verdict in (Verdict.CRASH, Verdict.TIMEOUT):
            rep.diagnostics = trim_text(sb.stderr[-8000:] or sb.stdout[-4000:])
        if rep.ok:
            _analyse(rep, dump, sb.stdout + "\n" + sb.stderr, arch)
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    rep.wall_s = time.perf_counter() - t0
    if use_cache and rep.verdict in (Verdict.OK, Verdict.COMPILE_ERROR):
        cfile.parent.mkdir(parents=True, exist_ok=True)
        tmp = cfile.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rep.to_json(), indent=1))
        os.replace(tmp, cfile)
    return rep


def _analyse(rep: CompileReport, dump: Path, output: str, arch: str) -> None:
    ptx = "\n".join(p.read_text(errors="replace") for p in sorted(dump.rglob("*.ptx")))
    rep.ptx_lines = ptx.count("\n")
    # the remarks{ptx} text the DSL printed; ptxas -v on the kept PTX (seconds) only when
    # the remarks gave no register count.
    kernels = parse_ptxas(output)
    if ptx and not any(k["registers"] is not None for k in kernels):
        kernels = _run_ptxas(dump, arch)
    rep.kernels = [KernelResources(k["kernel"][:120], k["registers"], k["stack_bytes"],
                                   k["spill_store_bytes"], k["spill_load_bytes"]) for k in kernels]
    regs = [k.registers for k in rep.kernels if k.registers is not None]
    rep.max_registers = max(regs) if regs else None
    rep.spill_bytes = sum(k.spill_store_bytes + k.spill_load_bytes for k in rep.kernels)
    rep.global_loads_by_bits = ptx_global_loads(ptx)
    total = sum(rep.global_loads_by_bits.values())
    rep.global_load_128b_share = rep.global_loads_by_bits.get("128", 0) / total if total else None


def _run_ptxas(dump: Path, arch: str) -> list[dict]:
    exe = shutil.which("ptxas") or ("/usr/local/bin/ptxas" if os.path.exists("/usr/local/bin/ptxas") else None)
    if exe is None:
        return []
    out: list[dict] = []
    for p in sorted(dump.rglob("*.ptx")):
        try:
            r = subprocess.run([exe, "-v", f"-arch={arch}", str(p), "-o", os.devnull],
                               capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        out += parse_ptxas(r.stdout + r.stderr)
    return out


def default_jobs() -> int:
    """Compiles run at once: $HARNESS_COMPILE_JOBS, else one per core up to 8 (each compile is
    a single-threaded child of ~1-2 GB; the lent H200 host has 16 cores, CI 2)."""
    env = os.environ.get("HARNESS_COMPILE_JOBS", "")
    if env.strip():
        try:
            return max(1, int(env))
        except ValueError:
            from ..errors import UserError

            raise UserError(f"HARNESS_COMPILE_JOBS must be an integer (got '{env}')") from None
    return max(1, min(8, os.cpu_count() or 1))


def compile_many(cand: Candidate, combos: list[tuple[str, int, dict[str, Any]]], *,
                 timeout_s: float = DEFAULT_TIMEOUT_S, use_cache: bool = True, cache_root: Path | None = None,
                 on_done: Callable[[CompileReport], None] | None = None,
                 jobs: int | None = None) -> list[CompileReport]:
    """compile_candidate for each (arch, tp, static), `jobs` sandboxed children at a time;
    reports in the order of `combos`. `on_done` runs in the caller's thread as each finishes.
    Every child is its own process group with its own deadline, and cache entries are
    written by atomic rename, so concurrent compiles share nothing mutable."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    jobs = min(jobs or default_jobs(), max(1, len(combos)))
    one = lambda c: compile_candidate(cand, c[0], c[1], c[2], timeout_s=timeout_s,  # noqa: E731
                                      use_cache=use_cache, cache_root=cache_root)
    out: list[CompileReport | None] = [None] * len(combos)
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="k3-compile") as pool:
        futs = {pool.submit(one, c): i for i, c in enumerate(combos)}
        for fut in as_completed(futs):
            out[futs[fut]] = rep = fut.result()
            if on_done:
                on_done(rep)
    return [r for r in out if r is not None]


def compile_matrix(cand: Candidate, archs: list[str] | None = None, tps: list[int] | None = None, *,
                   timeout_s: float = DEFAULT_TIMEOUT_S, use_cache: bool = True, cache_root: Path | None = None,
                   on_done: Callable[[CompileReport], None] | None = None,
                   jobs: int | None = None) -> list[CompileReport]:
    """Compile for every arch (default: the scope's) x TP (default: the scope's) x static key,
    `jobs` at a time (default_jobs())."""
    import reference_impls

    defn = reference_impls.get(cand.op)
    from ..errors import UserError
    from ..opdef import unsupported_tp

    archs = list(archs or cand.scope.archs)
    for a in archs:
        if a not in TARGET_ARCHS:
            raise UserError(f"unknown arch '{a}' (choose from {', '.join(TARGET_ARCHS)})")
    tps = list(tps or cand.scope.tp)
    for tp in tps:
        if why := unsupported_tp(tp):
            raise UserError(why)
    combos = list(itertools.product(archs, tps, static_keys(defn, cand)))
    return compile_many(cand, combos, timeout_s=timeout_s, use_cache=use_cache, cache_root=cache_root,
                        on_done=on_done, jobs=jobs)
