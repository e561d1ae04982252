"""Kernel registry: the one place where the K3 decode path chooses kernel or reference.

Every op call site of the decoder calls `run(op, inputs, tp=..., site=...)`. The call goes
to a promoted kernel when the kernel's declared scope covers it (arch, TP, batch range,
dtype, state dtype, named shape) and the op is not switched off (env
HARNESS_DISABLE_KERNELS=all|op1,op2, where a name that is no op switches all off, or
`disable(...)`); otherwise to the op's fp32
reference. Every call increments one counter (op, outcome, reason), so a test, the
numerics gate and `harness trace` can prove which path ran and why it was left.

Promoted kernels come from kernels_generated/promoted.json, a list of
{"op", "candidate", "scope"}. An op may hold several: a broad kernel and narrower ones (one
shape, one batch range) beside it. A call goes to the most specific entry whose scope covers
it (`KernelScope.size`: fewest points; among equals the one registered last), so a narrow
kernel wins inside its scope and the broad one runs everywhere else. Kernel calls are also
counted per candidate (`candidate_counters`), so a trace names which entry ran. A candidate
is compiled through an injected loader
`load_compiled(candidate_dir, arch, tp, **static) -> callable(**tensors)` that writes
outputs (and STATE tensors) in place. Importable without a GPU, CuTe DSL or pydantic.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import torch

ENV_DISABLE = "HARNESS_DISABLE_KERNELS"

KernelFn = Callable[..., None]                   # fn(**inputs, **outputs): writes in place
Loader = Callable[..., KernelFn]                 # load_compiled(candidate_dir, arch, tp, **static)

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32",
                torch.int32: "int32", torch.int64: "int64", torch.uint8: "uint8"}
_ARCH_BY_CAPABILITY = {(9, 0): "sm_90a", (10, 0): "sm_100a", (10, 3): "sm_103a"}


class Outcome(str, enum.Enum):
    KERNEL = "kernel"
    FALLBACK = "fallback"


class Reason(str, enum.Enum):
    IN_SCOPE = "in_scope"
    NO_KERNEL = "no_kernel"
    DISABLED = "disabled"
    ARCH = "arch"
    TP = "tp"
    BATCH = "batch"
    DTYPE = "dtype"
    SHAPE = "shape"
    ERROR = "error"


@dataclass(frozen=True)
class TraceKey:
    op: str
    outcome: Outcome
    reason: Reason


@dataclass(frozen=True)
class KernelScope:
    """Where a kernel may run (candidate.json "scope"). Empty tuples mean "any"."""

    archs: tuple[str, ...]
    tp: tuple[int, ...]
    batch: tuple[int, int]                       # inclusive range
    dtypes: tuple[str, ...] = ("bf16",)
    state_dtypes: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "KernelScope":
        lo, hi = d.get("batch", (1, 64))
        return cls(archs=tuple(d.get("archs", ())), tp=tuple(int(t) for t in d.get("tp", ())),
                   batch=(int(lo), int(hi)), dtypes=tuple(d.get("dtypes", ())),
                   state_dtypes=tuple(d.get("state_dtypes", ())), shapes=tuple(d.get("shapes", ())))

    def size(self) -> int:
        """How many (arch, tp, batch, dtype, state dtype, shape) combinations the scope admits,
        an empty tuple ("any") counting as _ANY values: the registry's measure of specificity.
        A scope inside another (`covers`) is never larger."""
        n = self.batch[1] - self.batch[0] + 1
        for dim in (self.archs, self.tp, self.dtypes, self.state_dtypes, self.shapes):
            n *= len(dim) if dim else _ANY
        return max(n, 0)

    def covers(self, other: "KernelScope") -> bool:
        """Whether every call `other` admits is inside this scope too."""
        def within(inner: tuple, outer: tuple) -> bool:
            return not outer or (bool(inner) and set(inner) <= set(outer))
        return (self.batch[0] <= other.batch[0] and other.batch[1] <= self.batch[1]
                and all(within(a, b) for a, b in ((other.archs, self.archs), (other.tp, self.tp),
                                                  (other.dtypes, self.dtypes),
                                                  (other.state_dtypes, self.state_dtypes),
                                                  (other.shapes, self.shapes))))

    def admits(self, arch: str, tp: int, batch: int, dtype: str, state_dtype: str, shape: str) -> Reason | None:
        """None when a call with these keys is inside the scope, else the first key outside it
        (the op's true shapes are checked by the registry on top)."""
        if self.archs and arch not in self.archs:
            return Reason.ARCH
        if self.tp and tp not in self.tp:
            return Reason.TP
        if not self.batch[0] <= batch <= self.batch[1]:
            return Reason.BATCH
        if self.dtypes and dtype not in self.dtypes:
            return Reason.DTYPE
        if self.state_dtypes and state_dtype not in self.state_dtypes:
            return Reason.DTYPE
        if self.shapes and shape not in self.shapes:
            return Reason.SHAPE
        return None


_ANY = 1 << 10        # what an empty ("any") scope dimension counts in KernelScope.size


def by_specificity(entries: "list[KernelEntry]") -> "list[KernelEntry]":
    """`entries` (in registration order) in the order a call tries them: the smallest scope
    first; among equal sizes the one registered last first."""
    order = sorted(range(len(entries)), key=lambda i: (entries[i].scope.size(), -i))
    return [entries[i] for i in order]


@dataclass
class KernelEntry:
    """One promoted kernel: either a ready callable (tests) or a candidate folder to load."""

    op: str
    candidate: str
    scope: KernelScope
    fn: KernelFn | None = None
    candidate_dir: Path | None = None
    _compiled: dict[tuple, KernelFn | BaseException] = field(default_factory=dict)


@dataclass(frozen=True)
class CallInfo:
    """What the registry reads off one call to test it against a scope."""

    arch: str
    tp: int
    batch: int
    dtype: str
    state_dtype: str
    static: tuple[tuple[str, str], ...]


def device_arch(device: torch.device) -> str:
    """"cpu" on the host; else the CUTLASS target arch of the GPU (sm_90a on H100/H200)."""
    if device.type != "cuda":
        return device.type
    cap = torch.cuda.get_device_capability(device)
    return _ARCH_BY_CAPABILITY.get(cap, f"sm_{cap[0]}{cap[1]}")


def _env_disabled() -> frozenset[str]:
    """The ops HARNESS_DISABLE_KERNELS switches off. A name that is no op fails closed: a
    typo (`moe_routr`) would otherwise leave the kernel it meant on, so it switches "all"
    off and `env_disable_problem()` says why."""
    return _env_state(os.environ.get(ENV_DISABLE, ""))[0]


def env_disable_problem() -> str | None:
    """One line when HARNESS_DISABLE_KERNELS names an op that does not exist, else None."""
    return _env_state(os.environ.get(ENV_DISABLE, ""))[1]


@functools.lru_cache(maxsize=8)
def _env_state(raw: str) -> tuple[frozenset[str], str | None]:
    """(the ops switched off, the problem line or None) for one value of HARNESS_DISABLE_KERNELS,
    parsed once per distinct value: every dispatch reads the variable, so a change takes effect at
    the next call, but the names are not split and checked again per call."""
    names = frozenset(p.strip() for p in raw.strip().split(",") if p.strip())
    unknown = _unknown_ops(names)
    if not unknown:
        return names, None
    import reference_impls  # noqa: PLC0415

    problem = (f"{ENV_DISABLE} names no op: {', '.join(unknown)} (known: all, {', '.join(reference_impls.OP_NAMES)}); "
               "every kernel is off until it is fixed")
    return frozenset({"all"}), problem


def _unknown_ops(names: frozenset[str] | set[str]) -> list[str]:
    import reference_impls  # noqa: PLC0415 - reference_impls imports harness.opdef

    return sorted(n for n in names if n != "all" and n not in reference_impls.OP_NAMES)


def _default_loader(candidate_dir: Path, arch: str, tp: int, **static: str) -> KernelFn:
    from harness.toolchain import load_compiled  # noqa: PLC0415 - optional dependency, GPU side

    return load_compiled(candidate_dir, arch, tp, **static)


class Registry:
    def __init__(self, loader: Loader | None = None, check_shapes: bool = True) -> None:
        """`check_shapes=False` lets calls of any size reach a kernel whose scope matches
        (tests drive test-only kernels through the tiny model); the default demands the
        op's true per-rank shapes."""
        self._loader: Loader = loader or _default_loader
        self._check_shapes = check_shapes
        self._kernels: dict[str, list[KernelEntry]] = {}     # op -> entries in registration order
        self._try_order: dict[str, list[KernelEntry]] = {}   # op -> the same, by_specificity (per change, not per call)
        self._shapes: dict[tuple, ShapePlan | None] = {}         # _shape_plan's memo
        self._layouts: dict[str, _OpLayout] = {}                 # _call_info's, per op
        self._disabled: set[str] = set()
        self._counts: Counter[TraceKey] = Counter()
        self._by_candidate: Counter[tuple[str, str]] = Counter()   # (op, candidate) -> kernel calls
        self._errors: dict[str, str] = {}
        self._lock = threading.Lock()

    # ---- what is registered ---------------------------------------------------------
    def register(self, op: str, scope: KernelScope, fn: KernelFn | None = None, *,
                 candidate: str = "direct", candidate_dir: Path | None = None) -> None:
        """Add a kernel for `op`. It replaces the op's entry of the same candidate id or the same
        scope; entries with other scopes stay (the most specific one covering a call runs it)."""
        if fn is None and candidate_dir is None:
            raise ValueError("register needs a callable or a candidate folder")
        kept = [e for e in self._kernels.get(op, []) if e.candidate != candidate and e.scope != scope]
        self._kernels[op] = kept + [KernelEntry(op, candidate, scope, fn, candidate_dir)]
        self._try_order[op] = by_specificity(self._kernels[op])

    def unregister(self, op: str, candidate: str | None = None) -> None:
        """Remove op's entry of `candidate`, or every entry of op when None."""
        kept = [e for e in self._kernels.get(op, []) if candidate is not None and e.candidate != candidate]
        if kept:
            self._kernels[op] = kept
            self._try_order[op] = by_specificity(kept)
        else:
            self._kernels.pop(op, None)
            self._try_order.pop(op, None)

    def load_manifest(self, manifest: Path, kernels_dir: Path | None = None) -> int:
        """Register every entry of promoted.json; returns how many. Missing file = none."""
        if not manifest.is_file():
            return 0
        entries = json.loads(manifest.read_text())
        base = kernels_dir or manifest.parent
        for e in entries:
            self.register(e["op"], KernelScope.from_json(e["scope"]), candidate=e["candidate"],
                          candidate_dir=base / e["op"] / e["candidate"])
        return len(entries)

    def entries(self, op: str | None = None) -> list[KernelEntry]:
        """The registered kernels (of `op`, or of every op by name), each op's in the order a
        call tries them (`by_specificity`)."""
        ops = [op] if op is not None else sorted(self._kernels)
        return [e for o in ops for e in self._try_order.get(o, [])]

    # ---- kill switch ----------------------------------------------------------------
    def disable(self, *ops: str) -> None:
        """Switch kernels off: op names, or "all". ValueError for a name that is no op."""
        unknown = _unknown_ops(set(ops))
        if unknown:
            raise ValueError(f"cannot disable {', '.join(unknown)}: no such op")
        self._disabled.update(ops)

    def enable(self, *ops: str) -> None:
        """Undo `disable` for these ops ("all" clears everything set by the API)."""
        if "all" in ops:
            self._disabled.clear()
        self._disabled.difference_update(ops)

    def is_disabled(self, op: str) -> bool:
        env_off, problem = _env_state(os.environ.get(ENV_DISABLE, ""))
        if problem:
            self._errors[ENV_DISABLE] = problem      # shown by `harness trace` and eval-model
        off = self._disabled | env_off
        return "all" in off or op in off

    @contextlib.contextmanager
    def disabled(self, *ops: str) -> Iterator[None]:
        before = set(self._disabled)
        self.disable(*(ops or ("all",)))
        try:
            yield
        finally:
            self._disabled = before

    # ---- counters -------------------------------------------------------------------
    def counters(self) -> dict[TraceKey, int]:
        with self._lock:
            return dict(self._counts)

    def candidate_counters(self) -> dict[tuple[str, str], int]:
        """Kernel calls per (op, candidate): which of an op's entries ran."""
        with self._lock:
            return dict(self._by_candidate)

    def errors(self) -> dict[str, str]:
        return dict(self._errors)

    def reset_counters(self) -> None:
        with self._lock:
            self._counts.clear()
            self._by_candidate.clear()
            self._errors.clear()

    def _count(self, op: str, outcome: Outcome, reason: Reason, candidate: str = "") -> None:
        with self._lock:
            self._counts[TraceKey(op, outcome, reason)] += 1
            if candidate:
                self._by_candidate[(op, candidate)] += 1

    # ---- dispatch -------------------------------------------------------------------
    def run(self, op: str, inputs: Mapping[str, torch.Tensor], *, tp: int, site: str = "",
            **static: str) -> dict[str, torch.Tensor]:
        """Outputs of `op` on `inputs` (STATE tensors included under their input names).
        `static` names the op's static key beyond TP (e.g. shape="kda_in_proj")."""
        defn, entry, info, where, reason = self._route(op, inputs, tp, static)
        if reason is not None:
            return self._fallback(defn, op, inputs, reason)
        return self._launch(defn, op, entry, info, where, inputs, site)

    def run_selected(self, op: str, inputs: Mapping[str, torch.Tensor], *, tp: int, site: str = "",
                     **static: str) -> dict[str, torch.Tensor] | None:
        """`run(...)` where it would call op's kernel (`selects_kernel`), else None with nothing
        run or counted: the decoder calls a fused op (gemm_situ_and_mul) this way and runs the pair
        of ops it replaces when it gets None, routing the call once."""
        defn, entry, info, where, reason = self._route(op, inputs, tp, static)
        if reason is not None or self._failed_before(entry, info):
            return None
        return self._launch(defn, op, entry, info, where, inputs, site)

    def selects_kernel(self, op: str, inputs: Mapping[str, torch.Tensor], *, tp: int, **static: str) -> bool:
        """Whether `run(op, inputs, tp=tp, **static)` would call op's kernel: one is registered, not
        disabled, the call is inside its scope and its compile has not failed before. Nothing runs
        or is counted."""
        _, entry, info, _, reason = self._route(op, inputs, tp, static)
        return reason is None and not self._failed_before(entry, info)

    def _route(self, op: str, inputs: Mapping[str, torch.Tensor], tp: int, static: Mapping[str, str]):
        """(definition, entry, call info, (shape plan, point), reason): reason None when one of
        op's kernels is registered, enabled and the call lies inside its scope (the most specific
        such entry), else why the call falls back (the broadest entry's reason)."""
        import reference_impls  # noqa: PLC0415 - reference_impls imports harness.opdef

        defn = reference_impls.get(op)
        entries = self._try_order.get(op, [])
        if not entries:
            return defn, None, None, None, Reason.NO_KERNEL
        if self.is_disabled(op):
            return defn, entries[-1], None, None, Reason.DISABLED
        layout = self._layouts.get(op)
        if layout is None:
            layout = self._layouts[op] = _OpLayout.of(defn)
        info = _call_info(layout, inputs, tp, static)
        shape_name = static.get("shape", "")
        reason = Reason.NO_KERNEL
        for entry in entries:
            reason, where = _scope_check(defn, entry.scope, info, shape_name, inputs, self._check_shapes, self._shapes)
            if reason is None:
                return defn, entry, info, where, None
        return defn, entries[-1], info, None, reason

    @staticmethod
    def _failed_before(entry: KernelEntry, info: CallInfo) -> bool:
        return isinstance(entry._compiled.get((info.arch, info.tp, info.static)), BaseException)

    def _launch(self, defn, op: str, entry: KernelEntry, info: CallInfo, where: tuple[ShapePlan, Any],
                inputs: Mapping[str, torch.Tensor], site: str) -> dict[str, torch.Tensor]:
        try:
            fn = self._compiled(entry, info)
            outs = (_alloc_outputs(defn, inputs, *where) if self._check_shapes
                    else _alloc_like_reference(defn, inputs))
            fn(**inputs, **outs)
        except Exception as exc:  # a broken kernel must never take the decode path down
            self._errors[op] = f"{site or op}: {type(exc).__name__}: {exc}"
            return self._fallback(defn, op, inputs, Reason.ERROR)
        self._count(op, Outcome.KERNEL, Reason.IN_SCOPE, entry.candidate)
        outs.update({name: inputs[name] for name in self._layouts[op].states})
        return outs

    def _fallback(self, defn, op: str, inputs: Mapping[str, torch.Tensor], reason: Reason):
        self._count(op, Outcome.FALLBACK, reason)
        return defn.run_reference(inputs)

    def _compiled(self, entry: KernelEntry, info: CallInfo) -> KernelFn:
        if entry.fn is not None:
            return entry.fn
        key = (info.arch, info.tp, info.static)
        got = entry._compiled.get(key)
        if got is None:
            try:
                got = self._loader(entry.candidate_dir, info.arch, info.tp, **dict(info.static))
            except Exception as exc:  # remembered: a failed compile is not retried per call
                got = exc
            entry._compiled[key] = got
        if isinstance(got, BaseException):
            raise got
        return got


@dataclass(frozen=True)
class _OpLayout:
    """Where the registry reads an op's call keys, worked out once per op from its definition
    (`Registry._layouts`): the inputs that carry the batch dim (and its axis), the activations
    and the STATE inputs (handed back with the outputs), each in the definition's order."""

    batch_axes: tuple[tuple[str, int], ...]
    activations: tuple[str, ...]
    states: tuple[str, ...]
    many_state_dtypes: bool

    @classmethod
    def of(cls, defn) -> "_OpLayout":
        from harness.opdef import Role  # noqa: PLC0415

        return cls(batch_axes=tuple((s.name, s.shape.index("B")) for s in defn.inputs if "B" in s.shape),
                   activations=tuple(s.name for s in defn.inputs if s.role is Role.ACTIVATION),
                   states=tuple(s.name for s in defn.inputs if s.role is Role.STATE),
                   many_state_dtypes=len(defn.state_dtypes) > 1)


def _first_present(inputs: Mapping[str, torch.Tensor], names: tuple[str, ...]) -> torch.Tensor | None:
    for name in names:
        t = inputs.get(name)
        if t is not None:
            return t
    return None


def _call_info(layout: _OpLayout, inputs: Mapping[str, torch.Tensor], tp: int,
               static: Mapping[str, str]) -> CallInfo:
    """The call's keys: batch from the first present input with a nonzero B dim, dtype from the first
    present activation, state dtype from "state" or else the first present STATE input."""
    batch = 0
    for name, axis in layout.batch_axes:
        t = inputs.get(name)
        if t is not None:
            batch = int(t.shape[axis])
            if batch:
                break
    act = _first_present(inputs, layout.activations)
    state = inputs.get("state") if "state" in layout.states else None
    state = state if state is not None else _first_present(inputs, layout.states)
    dtype = _DTYPE_NAMES.get(act.dtype, str(act.dtype)) if act is not None else ""
    state_dtype = _DTYPE_NAMES.get(state.dtype, str(state.dtype)) if state is not None else ""
    st = tuple(sorted(static.items()))
    if layout.many_state_dtypes and state_dtype and "state_dtype" not in static:
        st = tuple(sorted((*st, ("state_dtype", state_dtype))))
    device = next(iter(inputs.values())).device
    return CallInfo(device_arch(device), tp, batch, dtype, state_dtype, st)


OutputSpecs = tuple[tuple[str, tuple[int, ...], torch.dtype], ...]


def _alloc_outputs(defn, inputs: Mapping[str, torch.Tensor], plan: ShapePlan, point) -> dict[str, torch.Tensor]:
    """Output buffers: the plan's shapes when no output follows the context (worked out once per
    plan), else sized from the call's own tensors (dims bound by the inputs) and the definition's
    dims for the rest (e.g. top-k K)."""
    specs = plan.output_specs if plan.output_specs is not None else _output_specs(defn, inputs, point)
    device = next(iter(inputs.values())).device
    return {name: torch.empty(shape, dtype=dtype, device=device) for name, shape, dtype in specs}


def _output_specs(defn, inputs: Mapping[str, torch.Tensor], point) -> OutputSpecs:
    from harness.opdef import DTYPES, Role  # noqa: PLC0415

    dims = dict(defn.dims(point))
    for spec in defn.inputs:
        t = inputs.get(spec.name)
        if t is not None and t.dim() == len(spec.shape):
            dims.update({d: int(n) for d, n in zip(spec.shape, t.shape) if isinstance(d, str)})
    return tuple((s.name, s.resolve(dims), DTYPES[s.dtype]) for s in defn.outputs if s.role is not Role.STATE)


def _alloc_like_reference(defn, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Off-catalogue sizes (check_shapes=False, tests): buffers shaped like the reference's."""
    from harness.opdef import Role  # noqa: PLC0415

    ref = defn.run_reference(inputs)
    return {s.name: torch.empty_like(ref[s.name]) for s in defn.outputs if s.role is not Role.STATE}


@dataclass(frozen=True)
class ShapePlan:
    """What a call at one (op, batch, TP, shape, state dtype) must look like: its inputs' shapes
    at context 1 with the axes that follow the context (those that differ at context 2), the
    input and axis to read the context length from (None for an op without one), the point, and
    the output buffers' shapes and dtypes when none follows the context (as they do not for any op
    of the catalogue: mla_decode's outputs are per token and head)."""

    checks: tuple[tuple[str, tuple[int, ...], frozenset[int]], ...]
    context_at: tuple[str, int] | None
    point: Any                                     # harness.opdef.Point at context 1
    output_specs: OutputSpecs | None               # None when an output's shape follows the context

    def match(self, inputs: Mapping[str, torch.Tensor]) -> Any:
        """The call's point when every input has its shape (context axes free), else None."""
        for name, want, free in self.checks:
            t = inputs.get(name)
            if t is None:
                return None
            got = t.shape
            if not free:
                if got != want:                    # torch.Size is a tuple: one C comparison
                    return None
            elif len(got) != len(want) or any(g != w for i, (g, w) in enumerate(zip(got, want)) if i not in free):
                return None
        if self.context_at is None:
            return self.point
        name, axis = self.context_at
        return dataclasses.replace(self.point, context=max(int(inputs[name].shape[axis]), 1))


def _shape_plan(defn, info: CallInfo, shape_name: str, memo: dict[tuple, ShapePlan | None]) -> ShapePlan | None:
    """The ShapePlan for the call's batch, TP, shape and state dtype, or None when the op defines
    no such point. Memoised in `memo` (the registry's, per op and those four): the same few points
    recur every step."""
    from harness.opdef import DTYPES, Point, Role  # noqa: PLC0415

    key = (defn.name, info.batch, info.tp, shape_name, info.state_dtype)
    if key not in memo:
        try:
            at_1 = Point(batch=info.batch, tp=info.tp, context=1, shape=shape_name,
                         state_dtype=info.state_dtype if info.state_dtype in defn.state_dtypes else defn.state_dtypes[0])
            s1, s2 = defn.shapes(at_1), defn.shapes(dataclasses.replace(at_1, context=2))
            checks, context_at = [], None
            for spec in defn.inputs:
                want, alt = tuple(s1[spec.name]), tuple(s2[spec.name])
                free = frozenset(i for i, (a, b) in enumerate(zip(want, alt)) if a != b)
                if free and context_at is None:
                    context_at = (spec.name, min(free))
                checks.append((spec.name, want, free))
            outputs = [s for s in defn.outputs if s.role is not Role.STATE]
            output_specs = (tuple((s.name, tuple(s1[s.name]), DTYPES[s.dtype]) for s in outputs)
                            if all(s1[s.name] == s2[s.name] for s in outputs) else None)
            memo[key] = ShapePlan(tuple(checks), context_at, at_1, output_specs)
        except Exception:
            memo[key] = None
    return memo[key]


def _scope_check(defn, scope: KernelScope, info: CallInfo, shape_name: str, inputs: Mapping[str, torch.Tensor],
                 check_shapes: bool, memo: dict[tuple, ShapePlan | None]):
    """(None, (shape plan, point)) when the call is inside `scope`, else (reason, None)."""
    outside = scope.admits(info.arch, info.tp, info.batch, info.dtype, info.state_dtype, shape_name)
    if outside is not None:
        return outside, None
    # The tensors must have the op's true per-rank shapes (a tiny test model never does).
    plan = _shape_plan(defn, info, shape_name, memo)
    if plan is None:
        return Reason.SHAPE, None
    if not check_shapes:
        return None, (plan, plan.point)
    point = plan.match(inputs)
    return (None, (plan, point)) if point is not None else (Reason.SHAPE, None)


# ---- the process-wide registry the decoder uses -------------------------------------
_default: Registry | None = None


def default() -> Registry:
    """The registry of this process, with kernels_generated/promoted.json loaded once."""
    global _default
    if _default is None:
        from harness import paths  # noqa: PLC0415

        reg = Registry()
        reg.load_manifest(paths.promoted_manifest(), paths.kernels_dir())
        _default = reg
    return _default


def set_default(reg: Registry | None) -> None:
    global _default
    _default = reg


def run(op: str, inputs: Mapping[str, torch.Tensor], *, tp: int, site: str = "", **static: str):
    return default().run(op, inputs, tp=tp, site=site, **static)


def disable(*ops: str) -> None:
    default().disable(*ops)


def enable(*ops: str) -> None:
    default().enable(*ops)


def counters() -> dict[TraceKey, int]:
    return default().counters()


def reset_counters() -> None:
    default().reset_counters()


def counter_rows(counts: Mapping[TraceKey, int]) -> list[dict[str, Any]]:
    """Counters as JSON rows, sorted by op then outcome then reason."""
    rows = [{"op": k.op, "outcome": k.outcome.value, "reason": k.reason.value, "count": n}
            for k, n in counts.items()]
    return sorted(rows, key=lambda r: (r["op"], r["outcome"], r["reason"]))


def rows_to_counters(rows: list[Mapping[str, Any]]) -> dict[TraceKey, int]:
    return {TraceKey(r["op"], Outcome(r["outcome"]), Reason(r["reason"])): int(r["count"]) for r in rows}
