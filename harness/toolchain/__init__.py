"""The CuTe DSL toolchain: candidate folders, static checks, multi-arch compile with a
persistent cache, a sandboxed evaluation worker and the timing library.

Public API (the agent loop and the gates call these; nothing else is stable):

    from harness.toolchain import (
        Scope, Provenance, Candidate, create_candidate, load_candidate, list_candidates, scan_candidates,
        CandidateScan, candidate_id,
        check_source, check_candidate, StaticReport,
        compile_candidate, compile_matrix, CompileReport,
        evaluate_candidate, Evaluator, EvalReport, PointResult, run_canary, Verdict,
    )
    from harness.toolchain import timing   # summarize, rotation_copies, interleave_order, time_interleaved, ...

Names load lazily; the modules import torch (via harness.opdef) but neither cutlass,
pydantic nor any LLM SDK; cutlass is imported only in the sandboxed child processes.
"""
from __future__ import annotations

import importlib
from typing import Any

# Lazy re-exports: the sandboxed child (`python -m harness.toolchain._child`) imports this
# package first and must not pay for torch before it runs a job.
_EXPORTS = {
    "Candidate": "candidate", "Provenance": "candidate", "Scope": "candidate", "candidate_id": "candidate",
    "create_candidate": "candidate", "list_candidates": "candidate", "load_candidate": "candidate",
    "scan_candidates": "candidate", "CandidateScan": "candidate",
    "CompileReport": "compile", "compile_candidate": "compile", "compile_matrix": "compile",
    "static_for_point": "compile", "static_keys": "compile",
    "EvalReport": "evaluate", "Evaluator": "evaluate", "GpuUnhealthy": "evaluate", "PointResult": "evaluate",
    "evaluate_candidate": "evaluate", "gpu_available": "evaluate", "run_canary": "evaluate",
    "StaticReport": "static_check", "check_candidate": "static_check", "check_source": "static_check",
    "Verdict": "verdict",
    "load_compiled": "loader", "LoadError": "loader",     # the registry's and GPU gates' in-process loader
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
