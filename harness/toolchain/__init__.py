"""The CuTe DSL toolchain: candidate folders, static checks, multi-arch compile with a
persistent cache, a sandboxed evaluation worker and the timing library.

Public API (the agent loop and the gates call these; nothing else is stable):

    from harness.toolchain import (
        Scope, Provenance, Candidate, create_candidate, load_candidate, list_candidates, candidate_id,
        check_source, check_candidate, StaticReport,
        compile_candidate, compile_matrix, CompileReport,
        evaluate_candidate, Evaluator, EvalReport, PointResult, run_canary, Verdict,
    )
    from harness.toolchain import timing   # summarize, rotation_copies, interleave_order, time_interleaved, ...

Importing this package imports torch (via harness.opdef) but neither cutlass, pydantic
nor any LLM SDK; cutlass is imported only in the sandboxed child processes.
"""
from __future__ import annotations

from .candidate import Candidate, Provenance, Scope, candidate_id, create_candidate, list_candidates, load_candidate
from .compile import CompileReport, compile_candidate, compile_matrix, static_for_point, static_keys
from .loader import LoadError, load_compiled
from .evaluate import EvalReport, Evaluator, GpuUnhealthy, PointResult, evaluate_candidate, gpu_available, run_canary
from .static_check import StaticReport, check_candidate, check_source
from .verdict import Verdict

__all__ = [
    "Candidate", "Provenance", "Scope", "candidate_id", "create_candidate", "list_candidates", "load_candidate",
    "CompileReport", "compile_candidate", "compile_matrix", "static_for_point", "static_keys",
    "EvalReport", "Evaluator", "GpuUnhealthy", "PointResult", "evaluate_candidate", "gpu_available", "run_canary",
    "StaticReport", "check_candidate", "check_source", "Verdict", "LoadError", "load_compiled",
]
