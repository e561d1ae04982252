"""The op catalogue: one module per Kimi K3 decode op, each exporting `DEFINITION`.

The reference is sacred: it is the fallback of the decode path and the oracle of every
gate. Compute is fp32; each module's docstring states the math it implements.
"""
from __future__ import annotations

import importlib

from harness.opdef import OpDefinition

OP_NAMES: tuple[str, ...] = (
    "moe_router",
    "kda_decode",
    "mla_decode",
    "attn_res",
    "add_rmsnorm",
    "rmsnorm",
    "situ_and_mul",
    "silu_and_mul",
    "skinny_gemm",
    "gemm_situ_and_mul",
    "moe_experts",
    "oproj_allreduce_residual",
)


def get(name: str) -> OpDefinition:
    """The definition of op `name`; ValueError (one readable line) if there is none."""
    if name not in OP_NAMES:
        raise ValueError(f"unknown op '{name}' (known: {', '.join(OP_NAMES)})")
    return importlib.import_module(f"reference_impls.{name}").DEFINITION


def all_ops() -> list[OpDefinition]:
    return [get(n) for n in OP_NAMES]
