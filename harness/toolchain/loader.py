"""`load_compiled(candidate_dir, arch, tp, **static) -> callable(**tensors)`: a candidate
compiled in THIS process and bound to its module's `launch()`, for the registry (the decode
path) and the GPU gates.

Order of work:
1. the folder loads and validates (content id) through `load_candidate`;
2. the toolchain's sandboxed, cached compile (`compile_candidate`) must say OK for this
   (arch, TP, static key): a kernel.py that crashes or hangs the compiler fails there, in
   a child process, before any of its code is imported here (a cache hit costs ms);
3. on a CUDA GPU of that arch, kernel.py is imported under a per-candidate module name
   (an incumbent and a candidate can live side by side) with CUTE_DSL_ARCH set before
   cutlass is first imported, `compile(tp, options, **static)` is called once per key
   and the result is memoised for the process.
Without a GPU (or on another arch) it raises: the registry turns that into a fallback with
reason `error`, the gates into a recorded verdict.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

# What compile() receives in-process: the tvm-ffi call path (torch tensors, torch's current
# stream). The sandboxed compile adds remarks{ptx} for register reports; not needed here.
LAUNCH_OPTIONS = "--enable-tvm-ffi"

KernelFn = Callable[..., None]


class LoadError(RuntimeError):
    """The candidate cannot be made callable here (one line: why)."""


_lock = threading.Lock()
_modules: dict[str, ModuleType] = {}
_compiled: dict[tuple, Any] = {}


def _module_name(source_hash: str) -> str:
    return f"k3_candidate_{source_hash[:16]}"


def _import_kernel(path: Path, source_hash: str) -> ModuleType:
    """Import kernel.py from its file (the DSL reads the source, so never exec a string)."""
    name = _module_name(source_hash)
    mod = _modules.get(name)
    if mod is not None:
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _modules[name] = mod
    return mod


def _set_arch(arch: str) -> None:
    """CUTE_DSL_ARCH is read once, when cutlass is imported: one arch per process."""
    current = os.environ.get("CUTE_DSL_ARCH")
    if "cutlass" in sys.modules and current and current != arch:
        raise LoadError(f"cutlass was imported for {current}; cannot load for {arch} in this process")
    os.environ["CUTE_DSL_ARCH"] = arch


def load_compiled(candidate_dir: str | Path, arch: str, tp: int, *, check_compile: bool = True,
                  **static: Any) -> KernelFn:
    """A launcher `fn(**inputs, **outputs)` of the candidate in `candidate_dir` for
    (arch, tp, static). Raises LoadError (or the candidate's own exception) on failure."""
    import torch

    from .candidate import load_candidate
    from .compile import compile_candidate

    cdir = Path(candidate_dir).resolve()
    meta_op = _op_of(cdir)
    cand = load_candidate(meta_op, cdir)
    if arch not in cand.scope.archs:
        raise LoadError(f"{cand.op}/{cand.id} does not declare {arch} (scope archs {list(cand.scope.archs)})")
    if not torch.cuda.is_available():
        raise LoadError("no CUDA GPU in this process: a compiled candidate cannot run here")
    dev_arch = _device_arch()
    if dev_arch != arch:
        raise LoadError(f"this GPU is {dev_arch}, not {arch}")
    key = (cand.source_hash, arch, int(tp), tuple(sorted(static.items())))
    with _lock:
        got = _compiled.get(key)
        if got is None:
            if check_compile:
                rep = compile_candidate(cand, arch, int(tp), dict(static))
                if not rep.ok:
                    raise LoadError(f"compile {arch} TP{tp}: {rep.verdict.value}: {rep.message}")
            _set_arch(arch)
            mod = _import_kernel(cand.kernel_path, cand.source_hash)
            compiled = mod.compile(int(tp), LAUNCH_OPTIONS, **static)
            if compiled is None or not callable(compiled):
                raise LoadError(f"compile() returned {type(compiled).__name__}, not a compiled function")
            got = (mod, compiled)
            _compiled[key] = got
    mod, compiled = got
    launch = mod.launch

    def fn(**tensors: Any) -> None:
        launch(compiled, **tensors)

    fn.__qualname__ = f"load_compiled[{cand.op}/{cand.id} {arch} TP{tp}]"
    return fn


def _op_of(cdir: Path) -> str:
    """The op a candidate folder belongs to: kernels_generated/<op>/<id>/."""
    import json

    try:
        return str(json.loads((cdir / "candidate.json").read_text())["op"])
    except (OSError, ValueError, KeyError, TypeError):
        return cdir.parent.name


def _device_arch() -> str:
    import torch

    from ..registry import device_arch

    return device_arch(torch.device("cuda"))
