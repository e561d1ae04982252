"""Static checks of a candidate's kernel.py, on its syntax tree, before anything runs.

What a kernel may use (docs/fast_track_gates.md section 1): cutlass and its submodules,
cuda.bindings.driver (for the CUstream type only), math, operator, functools, typing, and
torch for tensor types and allocation. Everything else is refused: other imports (os,
subprocess, socket, ctypes, importlib, threading, pathlib, ...), torch compute on the
kernel path (torch.matmul, torch.nn.functional, .topk(), ...), file/env/network access
(open, torch.load), dynamic code (eval, exec, __import__, getattr and dunder attributes
that reach the interpreter's internals), and try/except (a torch fallback in a handler).

Each finding names a rule (the id a fixture in tests/fixtures/candidates/static/ targets)
and a line, so an agent can fix exactly that line.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

ALLOWED_MODULES = ("cutlass", "cuda.bindings.driver", "math", "operator", "functools", "typing",
                   "torch", "__future__")
# torch attributes a kernel.py may touch: dtypes, tensor types, allocation.
TORCH_ALLOWED = frozenset({
    "Tensor", "dtype", "device", "Size", "empty", "empty_like", "empty_strided", "zeros", "zeros_like",
    "bfloat16", "float16", "float32", "float", "half", "int8", "uint8", "int16", "int32", "int64",
    "bool", "float8_e4m3fn", "float8_e5m2", "cuda", "current_stream", "Stream",
})
TORCH_CUDA_ALLOWED = frozenset({"current_stream", "current_device", "Stream"})
CUDA_DRIVER_ALLOWED = frozenset({"CUstream"})
FORBIDDEN_CALLS = frozenset({
    "open", "eval", "exec", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "breakpoint", "input", "exit", "quit", "memoryview", "help", "dir",
})
# Tensor methods that are torch compute, whatever object they are called on.
TORCH_COMPUTE_METHODS = frozenset({
    "matmul", "mm", "bmm", "addmm", "einsum", "topk", "sort", "argsort", "softmax", "log_softmax",
    "sigmoid", "gather", "scatter", "scatter_", "index_select", "cumsum", "sum", "mean", "norm",
    "clone", "copy_", "float", "half", "bfloat16", "linear", "relu", "silu", "tanh", "rsqrt",
    "masked_fill", "masked_fill_", "index_put_", "argmax", "max", "min", "numpy", "tolist", "item",
    "cpu",
})
ALLOWED_DUNDERS = frozenset({"__init__", "__call__", "__name__", "__doc__"})


@dataclass
class Finding:
    rule: str          # forbidden_import | torch_compute | file_env_network | dynamic_code |
                       # dunder_access | try_except | missing_compile | missing_launch |
                       # bad_signature | no_cute_kernel | syntax_error | cuda_driver_use
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: [{self.rule}] {self.message}"


@dataclass
class StaticReport:
    ok: bool
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> str:
        return "static checks passed" if self.ok else "; ".join(str(f) for f in self.findings[:8])


def _allowed_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") and m in ("cutlass",) for m in ALLOWED_MODULES)


def _dotted(node: ast.AST) -> list[str] | None:
    """a.b.c -> ["a", "b", "c"] (None if the chain does not start at a plain name)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.torch_aliases: set[str] = set()
        self.cuda_aliases: set[str] = set()
        self.kernel_aliases: set[str] = set()      # names bound to cutlass.cute.kernel
        self.cute_aliases: set[str] = set()        # names bound to cutlass.cute
        self.cutlass_aliases: set[str] = set()
        self.n_kernels = 0
        self._judged: set[int] = set()             # inner nodes of an attribute chain already judged

    def add(self, rule: str, node: ast.AST, msg: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), msg))

    # ---- imports -------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if not _allowed_module(a.name):
                self.add("forbidden_import", node, f"import {a.name} (allowed: {', '.join(ALLOWED_MODULES)})")
                continue
            bound = a.asname or a.name.split(".")[0]
            if a.name == "torch":
                self.torch_aliases.add(bound)
            elif a.name == "cuda.bindings.driver":
                if a.asname is None:
                    self.add("cuda_driver_use", node, "import cuda.bindings.driver as <name> (the bare package exposes the driver)")
                self.cuda_aliases.add(bound)
            elif a.name == "cutlass.cute" and a.asname:
                self.cute_aliases.add(a.asname)
            elif a.name == "cutlass":
                self.cutlass_aliases.add(bound)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level or not _allowed_module(mod):
            self.add("forbidden_import", node, f"from {'.' * node.level}{mod} import ... (allowed: {', '.join(ALLOWED_MODULES)})")
            return
        for a in node.names:
            bound = a.asname or a.name
            if mod == "torch" and a.name not in TORCH_ALLOWED:
                self.add("torch_compute", node, f"from torch import {a.name}: torch is for types and allocation only")
            if mod == "cuda.bindings.driver" and a.name not in CUDA_DRIVER_ALLOWED:
                self.add("cuda_driver_use", node, f"cuda.bindings.driver.{a.name}: only CUstream may be used")
            if a.name == "*":
                self.add("forbidden_import", node, f"from {mod} import *")
            if mod == "cutlass.cute" and a.name == "kernel":
                self.kernel_aliases.add(bound)
            if mod == "cutlass" and a.name == "cute":
                self.cute_aliases.add(bound)
        self.generic_visit(node)

    # ---- names, attributes, calls ----------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "__loader__", "__spec__", "__file__"):
            self.add("dynamic_code", node, f"{node.id} reaches the interpreter's internals")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.add("dunder_access", node, f".{node.attr}: dunder attributes reach the interpreter's internals")
        chain = _dotted(node)
        if chain and len(chain) >= 2 and id(node) not in self._judged:
            inner = node.value
            while isinstance(inner, ast.Attribute):
                self._judged.add(id(inner))
                inner = inner.value
            head = chain[0]
            if head in self.torch_aliases:
                self._check_torch(node, chain)
            if head in self.cuda_aliases and chain[1] not in CUDA_DRIVER_ALLOWED:
                self.add("cuda_driver_use", node, f"{'.'.join(chain)}: only {head}.CUstream may be used")
            if head in self.cutlass_aliases | self.cute_aliases and any(p in ("base_dsl", "_mlir", "cutlass_dsl") for p in chain[1:]):
                self.add("dynamic_code", node, f"{'.'.join(chain)}: DSL internals are off limits")
        self.generic_visit(node)

    def _check_torch(self, node: ast.Attribute, chain: list[str]) -> None:
        attr = chain[1]
        if attr == "cuda" and len(chain) >= 3 and chain[2] in TORCH_CUDA_ALLOWED:
            return
        if attr not in TORCH_ALLOWED or attr == "cuda":
            rule = "file_env_network" if attr in ("load", "save", "hub", "from_file", "utils") else "torch_compute"
            self.add(rule, node, f"{'.'.join(chain)}: torch is for types and allocation only")

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
            rule = "file_env_network" if f.id in ("open", "input") else "dynamic_code"
            self.add(rule, node, f"{f.id}() is not allowed in a kernel")
        if isinstance(f, ast.Attribute) and f.attr in TORCH_COMPUTE_METHODS:
            chain = _dotted(f)
            if not chain or chain[0] not in self.cute_aliases | self.cutlass_aliases | {"cute", "cutlass"}:
                self.add("torch_compute", node, f".{f.attr}(): tensor compute outside a CuTe kernel")
        self.generic_visit(node)

    # ---- statements ----------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.add("try_except", node, "try/except in a kernel hides failures (a fallback path is not a kernel)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for d in node.decorator_list:
            target = d.func if isinstance(d, ast.Call) else d
            chain = _dotted(target)
            if chain and (chain[-1] == "kernel" and (len(chain) == 1 and chain[0] in self.kernel_aliases
                                                    or len(chain) >= 2 and chain[-2] in self.cute_aliases | {"cute"})):
                self.n_kernels += 1
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _check_entry_points(tree: ast.Module, findings: list[Finding], tensor_names: tuple[str, ...]) -> None:
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    comp = defs.get("compile")
    if comp is None:
        findings.append(Finding("missing_compile", 0, "no module-level def compile(tp, options, **static)"))
    else:
        names = [a.arg for a in comp.args.posonlyargs + comp.args.args]
        if names[:2] != ["tp", "options"] or comp.args.kwarg is None:
            findings.append(Finding("bad_signature", comp.lineno, "compile must be def compile(tp, options, **static)"))
    lau = defs.get("launch")
    if lau is None:
        findings.append(Finding("missing_launch", 0, "no module-level def launch(compiled, **tensors)"))
    else:
        names = [a.arg for a in lau.args.posonlyargs + lau.args.args] + [a.arg for a in lau.args.kwonlyargs]
        if not names or names[0] != "compiled":
            findings.append(Finding("bad_signature", lau.lineno, "launch's first parameter must be `compiled`"))
        elif lau.args.kwarg is None and tensor_names:
            missing = [t for t in tensor_names if t not in names[1:]]
            if missing:
                findings.append(Finding("bad_signature", lau.lineno, f"launch lacks tensors {missing} (or take **tensors)"))


def check_source(source: str, tensor_names: tuple[str, ...] = ()) -> StaticReport:
    """Run every static check on kernel.py source. `tensor_names` (the op's input and
    non-state output names) lets the launch signature be checked; never raises."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport(False, [Finding("syntax_error", exc.lineno or 0, f"{exc.msg}")])
    c = _Checker()
    c.visit(tree)
    findings = c.findings
    _check_entry_points(tree, findings, tensor_names)
    if c.n_kernels == 0:
        findings.append(Finding("no_cute_kernel", 0, "no function decorated with @cute.kernel"))
    findings.sort(key=lambda f: f.line)
    return StaticReport(not findings, findings)


def launch_tensor_names(op: str) -> tuple[str, ...]:
    """Every input name and every non-state output name of the op: what launch receives."""
    import reference_impls
    from ..opdef import Role

    d = reference_impls.get(op)
    return tuple(t.name for t in d.inputs) + tuple(t.name for t in d.outputs if t.role is not Role.STATE)


def check_candidate(cand) -> StaticReport:
    """Static checks of a loaded Candidate (harness.toolchain.candidate.Candidate)."""
    return check_source(cand.source, launch_tensor_names(cand.op))
