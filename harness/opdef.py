"""The typed definition of a Kimi K3 decode op.

An op is data plus two functions: which tensors it reads and writes (shapes written as
named dims, resolved per sweep point), how it is checked (tolerances per output), what it
costs (FLOPs and the minimum bytes any implementation must move), which axes a kernel's
scope may restrict, a seeded input generator and the fp32 PyTorch reference.

Every module under reference_impls/ exports one `DEFINITION: OpDefinition`.
"""
from __future__ import annotations

import enum
import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

BATCH_MIN, BATCH_MAX = 1, 64
TP_DEGREES = (8, 16)
SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64)
SWEEP_CONTEXTS = (1024, 8192, 32768, 131072)

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}


class RoutingProfile(str, enum.Enum):
    """How tokens pick experts in generated MoE inputs."""

    UNIFORM = "uniform"
    ZIPF = "zipf"          # Zipf ~1.1 over experts
    HOT = "hot"            # one expert every token prefers


class Role(str, enum.Enum):
    ACTIVATION = "activation"   # per-token input
    WEIGHT = "weight"           # model parameter, shared by all tokens
    STATE = "state"             # cache/state read and written in place (an output too)
    OUTPUT = "output"


class CheckKind(str, enum.Enum):
    REL_NORM = "rel_norm"       # ||out - ref|| / ||ref|| <= rtol, per tensor
    ALLCLOSE = "allclose"       # |out - ref| <= atol + rtol * |ref|, elementwise
    EXACT = "exact"             # bitwise equal (integers)
    TOPK_IDS = "topk_ids"       # id sets equal per row, up to ties in the selection key


@dataclass(frozen=True)
class Point:
    """One point of the sweep: what a kernel is compiled and measured for."""

    batch: int
    tp: int = 8
    context: int = 0                          # tokens already in the KV cache (MLA only)
    routing: RoutingProfile = RoutingProfile.UNIFORM
    state_dtype: str = "fp32"                 # KDA recurrent state: fp32 or bf16
    shape: str = ""                           # named GEMM shape (skinny_gemm), "" = the op's default

    def label(self) -> str:
        parts = [f"B={self.batch}", f"TP{self.tp}"]
        if self.context:
            parts.append(f"L={self.context}")
        if self.shape:
            parts.append(self.shape)
        return " ".join(parts)


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor; shape entries are dim names (resolved by `OpDefinition.dims`) or ints."""

    name: str
    shape: tuple[str | int, ...]
    dtype: str
    role: Role
    doc: str = ""

    def resolve(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else dims[d] for d in self.shape)


@dataclass(frozen=True)
class Tolerance:
    kind: CheckKind
    rtol: float = 0.0
    atol: float = 0.0
    reason: str = ""


DimsFn = Callable[[Point], dict[str, int]]
CountFn = Callable[[Point], int]
InputsFn = Callable[[Point, torch.Generator, str], dict[str, torch.Tensor]]
ReferenceFn = Callable[..., dict[str, torch.Tensor]]


@dataclass(frozen=True)
class OpDefinition:
    name: str
    summary: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dims: DimsFn
    flops: CountFn
    min_bytes: CountFn
    tolerances: Mapping[str, Tolerance]
    make_inputs: InputsFn
    reference: ReferenceFn
    scope_axes: tuple[str, ...] = ("arch", "tp", "batch", "dtype")
    uses_context: bool = False
    uses_routing: bool = False
    state_dtypes: tuple[str, ...] = ("fp32",)
    notes: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    # ---- derived views -------------------------------------------------------------
    @property
    def tensor_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs + self.outputs)

    def shapes(self, point: Point) -> dict[str, tuple[int, ...]]:
        dims = self.dims(point)
        return {t.name: t.resolve(dims) for t in self.inputs + self.outputs}

    def spec(self, name: str) -> TensorSpec:
        for t in self.inputs + self.outputs:
            if t.name == name:
                return t
        raise KeyError(name)

    def alloc_outputs(self, point: Point, device: str = "cpu", poison: bool = False) -> dict[str, torch.Tensor]:
        """Output buffers for destination-passing kernels; `poison` fills floats with NaN
        and integers with -1 so that an element the kernel never writes fails the check."""
        dims = self.dims(point)
        outs: dict[str, torch.Tensor] = {}
        for t in self.outputs:
            if t.role is Role.STATE:
                continue                      # state outputs alias an input buffer
            dt = DTYPES[t.dtype]
            buf = torch.empty(t.resolve(dims), dtype=dt, device=device)
            if poison:
                buf.fill_(float("nan") if dt.is_floating_point else -1)
            outs[t.name] = buf
        return outs

    def run_reference(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The oracle: never mutates `inputs` (state inputs are cloned first)."""
        cloned = {k: (v.clone() if self.spec(k).role is Role.STATE else v) for k, v in inputs.items()}
        return self.reference(**cloned)

    def source_hash(self) -> str:
        """Hash of the module that defines this op (definition + reference): evidence pins it."""
        mod = inspect.getmodule(self.reference)
        src = inspect.getsource(mod) if mod is not None else self.name
        return hashlib.sha256(src.encode()).hexdigest()


def unsupported_tp(tp: int) -> str | None:
    """One readable sentence if `tp` is not a K3 tensor-parallel degree, else None."""
    if tp in TP_DEGREES:
        return None
    return f"TP {tp} is not supported (choose from {', '.join(map(str, TP_DEGREES))})"


def check_point(defn: OpDefinition, point: Point) -> None:
    """Raise ValueError with one readable sentence if `point` is outside what the op supports."""
    if not BATCH_MIN <= point.batch <= BATCH_MAX:
        raise ValueError(f"batch {point.batch} is outside {BATCH_MIN}..{BATCH_MAX}")
    if why := unsupported_tp(point.tp):
        raise ValueError(why)
    if point.context < 0:
        raise ValueError(f"context {point.context} must be >= 0")
    if defn.uses_context and point.context < 1:
        raise ValueError(f"{defn.name} needs --context >= 1 (tokens in the KV cache)")
    if point.state_dtype not in defn.state_dtypes:
        raise ValueError(f"{defn.name} supports state dtypes {defn.state_dtypes}, not {point.state_dtype}")
