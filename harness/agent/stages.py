"""The candidate pipeline seen from the agent loop: static checks, compile per arch,
evaluation on the GPU. Everything here calls harness.toolchain (never copies it) and turns
its reports into the loop's records (records.py)."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from .records import CompileInfo, EvalInfo, Mismatch, StageStatus, Timing, trim_error


def gpu_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@dataclass
class StaticResult:
    ok: bool
    problems: list[str]


class ToolchainStages:
    """Runs each stage through harness.toolchain. `compile_tp` is the TP the search compiles
    at (the full TP matrix is compiled by the gates)."""

    def __init__(self, gpu_name: str = "h200", compile_tp: int = 8, compile_timeout_s: float = 300.0,
                 eval_timeout_s: float = 600.0, use_gpu: bool | None = None):
        self.gpu_name = gpu_name
        self.compile_tp = compile_tp
        self.compile_timeout_s = compile_timeout_s
        self.eval_timeout_s = eval_timeout_s
        self.has_gpu = gpu_available() if use_gpu is None else use_gpu

    def static(self, cand) -> StaticResult:
        from ..toolchain.static_check import check_candidate

        rep = check_candidate(cand)
        return StaticResult(rep.ok, [str(f) for f in rep.findings])

    def compile(self, cand, arch: str) -> CompileInfo:
        from ..toolchain.compile import compile_candidate

        rep = compile_candidate(cand, arch, self.compile_tp, None, timeout_s=self.compile_timeout_s)
        ld128 = (rep.global_loads_by_bits or {}).get("128")
        if rep.ok:
            return CompileInfo(arch, StageStatus.OK, rep.max_registers, rep.spill_bytes, ld128,
                               rep.compile_s, rep.cache_hit)
        err = rep.message + ("\n" + rep.diagnostics if rep.diagnostics else "")
        return CompileInfo(arch, StageStatus.FAILED, seconds=rep.compile_s, cached=rep.cache_hit,
                           error=trim_error(f"[{rep.verdict.value}] {err}"))

    def evaluate(self, cand) -> EvalInfo:
        if not self.has_gpu:
            return EvalInfo(StageStatus.NOT_RUN, "NOT_RUN", "no CUDA GPU on this machine")
        fn = _find_evaluator()
        if fn is None:
            return EvalInfo(StageStatus.NOT_RUN, "NOT_RUN", "the toolchain has no evaluation entry point yet")
        res = fn(cand, gpu=self.gpu_name, timeout_s=self.eval_timeout_s)
        return eval_info_from(res)


def _find_evaluator() -> Callable[..., Any] | None:
    """harness.toolchain's evaluation entry point (evaluate.evaluate_candidate)."""
    for mod_name, attr in (("harness.toolchain.evaluate", "evaluate_candidate"),
                           ("harness.toolchain.worker", "evaluate_candidate"),
                           ("harness.toolchain", "evaluate_candidate")):
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        if callable(getattr(mod, attr, None)):
            return getattr(mod, attr)
    return None


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def eval_info_from(res: Any) -> EvalInfo:
    """Map the toolchain's evaluation result (dataclass or dict) onto EvalInfo."""
    verdict = _get(res, "verdict")
    verdict = getattr(verdict, "value", verdict) or "CRASH"
    mismatches = []
    for t in _get(res, "mismatches", None) or _get(res, "checks", None) or []:
        if isinstance(t, dict) and "tensors" in t:
            items = list(t["tensors"].values())
        else:
            items = [t]
        for c in items:
            if _get(c, "ok", False):
                continue
            mismatches.append(Mismatch(str(_get(c, "name", _get(c, "tensor", "?"))), str(_get(c, "reason", "")),
                                       float(_get(c, "max_abs_err", 0.0) or 0.0),
                                       float(_get(c, "rel_norm_err", 0.0) or 0.0),
                                       list(_get(c, "worst", []) or [])[:5]))
    timings = []
    for t in _get(res, "timings", None) or []:
        k = _get(t, "kernel_us", None) or _get(t, "median_us", None)
        if k:
            timings.append(Timing(int(_get(t, "batch", 0)), int(_get(t, "tp", 8)), float(k),
                                  _get(t, "incumbent_us", None) or _get(t, "reference_us", None),
                                  _get(t, "floor_us", None), _get(t, "compiled_us", None)))
    status = StageStatus.OK if verdict == "OK" else StageStatus.FAILED
    detail = str(_get(res, "message", "") or _get(res, "detail", "") or "")
    return EvalInfo(status, str(verdict), trim_error(detail, 1000), mismatches[:8], timings)
