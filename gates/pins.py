"""Which files each gate's evidence pins: the gate's module and every project module it can
import, found by reading the import statements (no code runs).

An evidence record stores, per gate, one sha256 over these files (`GateRecord.code_sha256`).
An edit to any of them makes that gate's recorded verdicts stale, and only that gate's: a fix
in the perf gate's timing re-runs perf_sweep, not the model evals.

What a gate pins:
- its module `gates/<gate>.py`, the sandbox that runs a GPU gate in a child
  (`gates/_isolated.py`) and the evidence writer (`harness/evidence.py`): the roots;
- every module of the `gates` and `harness` packages that a root imports, at module level or
  inside a function, directly or through other such modules; each imported module's parent
  packages (`__init__.py` runs on import);
- the package data of every package reached (files under `<package>/data/`: the model gate's
  prompts and JSON schemas).

Not pinned here: the op references (`reference_impls/`: a record pins its own op's reference
through `Hashes.reference`; the model gate runs the other ops' references on both of its paths),
the gate config (`Hashes.gate_config`), the candidate (`Hashes.candidate`), and the judges:
`harness/promotion.py` and `gates/suite.py` (`run_gates` only dispatches; `recheck` re-derives
every recorded verdict with today's decision functions, which each gate's own pin covers).
Re-running a gate under a changed judge would not make the old judge's records any more
trustworthy; the judges are guarded by their tests.

Cost. `gate_code_pins` is called once per candidate by the dashboard and by every evidence
check, so a call stats the files of the pinned packages once (one walk) and, when none of them
changed since the last call, returns that call's answer. Otherwise it follows the imports of
every gate together; a file is read, hashed and parsed again only when its stat stamp changed:
(mtime, ctime, size, inode). The ctime is what a same-size edit whose mtime was set back
(`touch -d`, `os.utime`, a tool preserving times) cannot hide: no call sets it but the kernel's own.
"""
from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from . import ALL_GATES

PINNED_PACKAGES = ("gates", "harness")
COMMON_ROOTS = ("gates/_isolated.py", "harness/evidence.py")

Stamp = tuple[int, int, int, int]  # (st_mtime_ns, st_ctime_ns, st_size, st_ino): a file's version, to the caches


@dataclass(frozen=True)
class GateCodePins:
    """What one gate's evidence pins."""

    code_sha256: str                    # sha256_files over `files`: GateRecord.code_sha256
    files: tuple[str, ...]              # repo-relative, sorted
    file_sha256: Mapping[str, str]      # each of `files` -> sha256 of its bytes (read-only)


def gate_code_pins(root: Path, gates: Iterable[str] | None = None) -> dict[str, GateCodePins]:
    """For each gate (default: every gate, in ALL_GATES order), the files its evidence pins, one
    sha256 over them and each file's own sha256."""
    root = root.resolve()
    names = tuple(gates) if gates is not None else tuple(g.value for g in ALL_GATES)
    stamps = _fingerprint(root)
    hit = _PINS.get((root, names))
    if hit is not None and hit[0] == stamps:
        return dict(hit[1])
    walk = _Walk(root, stamps)
    closures = {g: walk.closure((f"gates/{g}.py", *COMMON_ROOTS)) for g in names}
    out: dict[str, GateCodePins] = {}
    for gate, paths in closures.items():
        files = tuple(p.relative_to(root).as_posix() for p in paths)
        sources = [_source(p, stamps.get(str(p))) for p in paths]
        out[gate] = GateCodePins(_sha256_named(zip(files, (s.data for s in sources))), files,
                                 MappingProxyType({f: s.sha256 for f, s in zip(files, sources)}))
    if all(str(p) in stamps for paths in closures.values() for p in paths):    # else: not cacheable
        _PINS[(root, names)] = (stamps, out)
    return dict(out)


def sha256_files(paths: list[Path], root: Path) -> str:
    """sha256 over (relative path, bytes) of each file, in sorted path order."""
    named = sorted(((p.relative_to(root).as_posix(), p) for p in paths), key=lambda rp: rp[0])
    return _sha256_named((rel, p.read_bytes()) for rel, p in named)


def _sha256_named(files: Iterable[tuple[str, bytes]]) -> str:
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode() + b"\0")
        h.update(data + b"\0")
    return h.hexdigest()


# ---- caches ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Syntax:
    """What the walk needs from one module's source: its import statements, and whether it is
    a lazy package (an `__init__` with a module-level `__getattr__`) and its `_EXPORTS` map."""

    imports: tuple[str, ...]                                   # `import a.b` -> "a.b"
    from_imports: tuple[tuple[int, str, tuple[str, ...]], ...]  # (level, module or "", names but `*`)
    lazy: bool = False
    exports: Mapping[str, str] | None = None                   # None: no readable `_EXPORTS` literal


@dataclass
class _Source:
    """One version of a pinned file. Its bytes are kept (~270 KB for every gate together): a
    gate's code sha256 is over them, and an edit to one file then re-reads only that file."""

    stamp: Stamp | None                 # None: not stat'ed by the walk (never reused)
    data: bytes
    sha256: str
    syntax: _Syntax | None = None       # parsed on first use


_SOURCES: dict[Path, _Source] = {}
_PINS: dict[tuple[Path, tuple[str, ...]], tuple[dict[str, Stamp], dict[str, GateCodePins]]] = {}


def _fingerprint(root: Path) -> dict[str, Stamp]:
    """Path -> stamp of every file that could be pinned (the pinned packages, less __pycache__):
    the one stat walk of a call, and what decides whether the last answer still holds."""
    out: dict[str, Stamp] = {}

    def scan(folder: str) -> None:
        with os.scandir(folder) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    if e.name != "__pycache__":
                        scan(e.path)
                elif e.is_file():
                    st = e.stat()
                    out[e.path] = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)

    for pkg in PINNED_PACKAGES:
        if (root / pkg).is_dir():
            scan(str(root / pkg))
    return out


def _read(path: Path) -> bytes:
    """The one place a pinned file is read (tests count the calls, and those of `_parse`)."""
    return path.read_bytes()


def _source(path: Path, stamp: Stamp | None) -> _Source:
    """A file's bytes and sha256, read again only when its stamp changed."""
    hit = _SOURCES.get(path)
    if hit is not None and stamp is not None and hit.stamp == stamp:
        return hit
    data = _read(path)
    src = _Source(stamp, data, hashlib.sha256(data).hexdigest())
    _SOURCES[path] = src
    return src


def _syntax(path: Path, stamp: Stamp | None) -> _Syntax:
    src = _source(path, stamp)
    if src.syntax is None:
        src.syntax = _parse(path, src.data)
    return src.syntax


def _parse(path: Path, data: bytes) -> _Syntax:
    """Read a module's imports (relative ones unresolved) and, for a lazy package, its exports."""
    tree = ast.parse(data, filename=str(path))
    imports: list[str] = []
    from_imports: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            from_imports.append((node.level, node.module or "", tuple(a.name for a in node.names if a.name != "*")))
    if path.name != "__init__.py" or not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__"
                                             for n in tree.body):
        return _Syntax(tuple(imports), tuple(from_imports))
    return _Syntax(tuple(imports), tuple(from_imports), lazy=True, exports=_exports(tree))


def _exports(tree: ast.Module) -> Mapping[str, str] | None:
    """The module's first `_EXPORTS = {name: submodule}` literal, None if absent or unreadable."""
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in n.targets):
            try:
                return {str(k): str(v) for k, v in ast.literal_eval(n.value).items()}
            except (ValueError, AttributeError):
                return None
    return None


# ---- the walk ----------------------------------------------------------------------------
def _dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _with_parents(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


class _Walk:
    """Every gate's closure, computed together: each file's imports are resolved, and each
    module name is looked up on disk, once."""

    def __init__(self, root: Path, stamps: dict[str, Stamp]) -> None:
        self.root, self.stamps = root, stamps
        self._files: dict[str, Path | None] = {}
        self._runs: dict[Path, list[Path]] = {}

    def closure(self, roots: tuple[str, ...]) -> tuple[Path, ...]:
        """The files that run from `roots`, and their packages' data, sorted by repo-relative path."""
        todo = [self.root / r for r in roots if (self.root / r).is_file()]
        seen: set[Path] = set()
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo.extend(f for f in self._runs_with(p) if f not in seen)
        data = {d for p in seen if p.name == "__init__.py" for d in (p.parent / "data").rglob("*")
                if d.is_file() and "__pycache__" not in d.parts}
        return tuple(sorted(seen | data, key=lambda q: q.relative_to(self.root).as_posix()))

    def _runs_with(self, path: Path) -> list[Path]:
        """The files that run when `path` is imported: its imports and its own packages."""
        if path not in self._runs:
            names = [n for mod in self._imported_modules(path) for n in _with_parents(mod)]
            names += _with_parents(_dotted(self.root, path))        # a module's own packages run first
            self._runs[path] = [f for n in names if (f := self._module_file(n)) is not None]
        return self._runs[path]

    def _module_file(self, dotted: str) -> Path | None:
        """`a.b.c` -> root/a/b/c.py or root/a/b/c/__init__.py, if it exists."""
        if dotted not in self._files:
            base = self.root.joinpath(*dotted.split("."))
            found = (p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file())
            self._files[dotted] = next(found, None)
        return self._files[dotted]

    def _imported_modules(self, path: Path) -> set[str]:
        """Dotted names of project modules that `path` imports (absolute and relative imports;
        `from a import b` counts `a.b` when b is a submodule, else `a` and, for a lazy package
        `a`, the submodules that may define b)."""
        syntax = _syntax(path, self.stamps.get(str(path)))
        here = _dotted(self.root, path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        found = set(syntax.imports)
        for level, module, names in syntax.from_imports:
            if level:
                anchor = package.split(".")[: len(package.split(".")) - (level - 1)]
                base = ".".join(anchor + ([module] if module else []))
            else:
                base = module
            found.add(base)
            for name in names:
                found.add(f"{base}.{name}")
                if base.split(".")[0] in PINNED_PACKAGES and self._module_file(f"{base}.{name}") is None:
                    found.update(f"{base}.{m}" for m in self._lazy_sources(base, name))
        return {m for m in found if m.split(".")[0] in PINNED_PACKAGES}

    def _lazy_sources(self, package: str, name: str) -> set[str]:
        """The submodules that may define `name` when it is imported from `package`. A package
        whose `__init__` has a module-level `__getattr__` loads names from submodules on first
        use (harness.toolchain does); its `_EXPORTS = {name: submodule}` literal says which one.
        Without a readable `_EXPORTS`, any submodule may. Empty for a package that is not lazy."""
        init = self._module_file(package)
        if init is None or init.name != "__init__.py":
            return set()
        syntax = _syntax(init, self.stamps.get(str(init)))
        if not syntax.lazy:
            return set()
        if syntax.exports is not None:
            return {syntax.exports[name]} if name in syntax.exports else set()
        subs = {p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"}
        return subs | {p.parent.name for p in init.parent.glob("*/__init__.py")}
