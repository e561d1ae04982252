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
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PINNED_PACKAGES = ("gates", "harness")
COMMON_ROOTS = ("gates/_isolated.py", "harness/evidence.py")


def _module_file(root: Path, dotted: str) -> Path | None:
    """`a.b.c` -> root/a/b/c.py or root/a/b/c/__init__.py, if it exists."""
    base = root.joinpath(*dotted.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _dotted(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(root: Path, path: Path) -> set[str]:
    """Dotted names of project modules that `path` imports (absolute and relative imports;
    `from a import b` counts `a.b` when b is a submodule, else `a`)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    here = _dotted(root, path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.add(base)
            for a in node.names:
                if a.name == "*":
                    continue
                found.add(f"{base}.{a.name}")
                if _module_file(root, f"{base}.{a.name}") is None:
                    found.update(f"{base}.{m}" for m in _lazy_sources(root, base, a.name))
    return {m for m in found if m.split(".")[0] in PINNED_PACKAGES}


def _lazy_sources(root: Path, package: str, name: str) -> set[str]:
    """The submodules that may define `name` when it is imported from `package`. A package
    whose `__init__` has a module-level `__getattr__` loads names from submodules on first use
    (harness.toolchain does); its `_EXPORTS = {name: submodule}` literal says which one.
    Without a readable `_EXPORTS`, any submodule may. Empty for a package that is not lazy."""
    init = _module_file(root, package)
    if init is None or init.name != "__init__.py":
        return set()
    tree = ast.parse(init.read_bytes(), filename=str(init))
    if not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body):
        return set()
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in n.targets):
            try:
                exports = {str(k): str(v) for k, v in ast.literal_eval(n.value).items()}
            except (ValueError, AttributeError):
                break
            return {exports[name]} if name in exports else set()
    subs = {p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"}
    return subs | {p.parent.name for p in init.parent.glob("*/__init__.py")}


def _with_parents(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


_CACHE: dict[tuple[Path, tuple[str, ...]], tuple[tuple, tuple[Path, ...]]] = {}


def _fingerprint(root: Path) -> tuple:
    """(path, mtime, size) of every file that could be pinned: the cache key of a closure."""
    return tuple((p.as_posix(), st.st_mtime_ns, st.st_size)
                 for pkg in PINNED_PACKAGES for p in sorted((root / pkg).rglob("*"))
                 if "__pycache__" not in p.parts and p.is_file() and (st := p.stat()))


def _closure(root: Path, roots: tuple[str, ...]) -> tuple[Path, ...]:
    fp = _fingerprint(root)
    hit = _CACHE.get((root, roots))
    if hit is not None and hit[0] == fp:
        return hit[1]
    files = _walk(root, roots)
    _CACHE[(root, roots)] = (fp, files)
    return files


def _walk(root: Path, roots: tuple[str, ...]) -> tuple[Path, ...]:
    todo = [root / r for r in roots if (root / r).is_file()]
    seen: set[Path] = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for mod in _imported_modules(root, p):
            for name in _with_parents(mod):
                f = _module_file(root, name)
                if f is not None and f not in seen:
                    todo.append(f)
        for name in _with_parents(_dotted(root, p)):          # a module's own packages run first
            f = _module_file(root, name)
            if f is not None and f not in seen:
                todo.append(f)
    data = {d for p in seen if p.name == "__init__.py" for d in (p.parent / "data").rglob("*")
            if d.is_file() and "__pycache__" not in d.parts}
    return tuple(sorted(seen | data, key=lambda q: q.relative_to(root).as_posix()))


def gate_code_files(root: Path, gate: str) -> list[Path]:
    """The files gate `gate`'s records pin, sorted by path."""
    return list(_closure(root.resolve(), (f"gates/{gate}.py", *COMMON_ROOTS)))


def sha256_files(paths: list[Path], root: Path) -> str:
    """sha256 over (relative path, bytes) of each file, in sorted path order."""
    h = hashlib.sha256()
    for p in sorted(paths, key=lambda q: q.relative_to(root).as_posix()):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def gate_code_hash(root: Path, gate: str) -> str:
    root = root.resolve()
    return sha256_files(gate_code_files(root, gate), root)
