"""Rendering the prompt templates (prompts/*.md.j2) and hashing what was sent.

The templates are part of the harness (they state the gate rules), so they are read from
the checkout, never from a run or a reply. A candidate's `provenance.prompt_hash` is the
sha256 of exactly the system prompt and messages that produced it.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import math
from dataclasses import replace
from typing import Any

from .. import paths
from ..hardware import GpuProfile, roofline
from ..opdef import BATCH_MAX, OpDefinition, Point
from .ledger import load_ledger
from .providers import Message
from .records import CandidateRecord
from .stages import POINT_CONTEXT
from .state import Incumbent

PROMPT_POINTS = (1, 8, 64)        # batches shown in the drafting prompt's target table


def _env():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    return Environment(loader=FileSystemLoader(str(paths.REPO_ROOT / "prompts")), undefined=StrictUndefined,
                       keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False, autoescape=False)


def render(name: str, **ctx: Any) -> str:
    return _env().get_template(name).render(**ctx)


def prompt_hash(system: str, messages: list[Message]) -> str:
    payload = json.dumps({"system": system, "messages": [[m.role, m.content] for m in messages]},
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def _tolerances(defn: OpDefinition) -> str:
    return "; ".join(f"{k}: {v.kind.value} rtol={v.rtol:g} atol={v.atol:g}" for k, v in defn.tolerances.items())


def system_prompt(defn: OpDefinition, profile: GpuProfile, archs: tuple[str, ...], tps: tuple[int, ...]) -> str:
    try:
        from importlib.metadata import version

        cv = version("nvidia-cutlass-dsl")
    except Exception:
        cv = "4.8.1"
    return render("system.md.j2", cutlass_version=cv, archs=archs, gpu_name=profile.name.upper(),
                  batch_max=BATCH_MAX, tps=tps, tolerances=_tolerances(defn))


def draft_prompt(defn: OpDefinition, profile: GpuProfile, tp: int, best: CandidateRecord | None,
                 best_source: str | None, history: list[CandidateRecord], hint: str = "",
                 incumbents: dict[int, Incumbent] | None = None,
                 promoted: tuple[str, str] | None = None) -> str:
    """The drafting prompt. `incumbents`: batch -> what runs that batch's search point today and its
    time (RunState.incumbent_times); the target table's row for the batch (floor, bytes, time to
    beat) is at that point's shape and state dtype, so the floor and the time to beat are of one
    GEMM. `promoted` = (id, source) of the op's promoted kernel,
    shown when this run has no best kernel yet: a first draft starts from what is in production.
    The op's ledger (`ledger.load_ledger`: ideas measured on a GPU before and not kept) is listed in
    every draft."""
    mod = inspect.getmodule(defn.reference)
    ref_src = inspect.getsource(mod) if mod is not None else inspect.getsource(defn.reference)
    p1 = Point(batch=1, tp=tp, context=POINT_CONTEXT if defn.uses_context else 0)
    shapes1 = defn.shapes(p1)
    tensors = [{"name": t.name, "role": t.role.value, "dtype": t.dtype, "shape": list(t.shape),
                "shape_b1": list(shapes1[t.name]), "doc": t.doc} for t in defn.inputs + defn.outputs]
    points = []
    for b in PROMPT_POINTS:
        inc = (incumbents or {}).get(b)
        pt = Point(batch=b, tp=tp, context=p1.context)                  # the op's default shape and state
        if inc is not None:
            pt = replace(pt, shape=inc.shape, state_dtype=inc.state_dtype)
        rl = roofline(defn.flops(pt), defn.min_bytes(pt), profile)
        key = [pt.shape] + ([pt.state_dtype] if inc and len(defn.state_dtypes) > 1 else [])
        points.append({"batch": b, "key": " ".join(k for k in key if k), "min_mbytes": defn.min_bytes(pt) / 1e6,
                       "gflops": defn.flops(pt) / 1e9, "floor_us": rl.floor_us, "bound": rl.bound,
                       "incumbent_us": inc.us if inc else None,
                       "incumbent_is_reference": inc.on_reference if inc else False})
    static_args = ", ".join(a for a in ("state_dtype" if len(defn.state_dtypes) > 1 else "",) if a)
    best_ctx = None
    if best is not None and best_source is not None:
        best_ctx = {"id": best.id, "summary": best.summary(), "source": best_source}
    return render("draft.md.j2", op=defn, reference_source=ref_src.strip(), tensors=tensors, tp=tp,
                  batch_max=BATCH_MAX, tolerances=_tolerances(defn), static_args=static_args, points=points,
                  gpu_name=profile.name.upper(), best=best_ctx,
                  promoted={"id": promoted[0], "source": promoted[1]} if promoted else None,
                  history=[{"id": h.id, "summary": h.summary()} for h in history[-8:]], hint=hint,
                  measured=[m.line() for m in load_ledger(defn.name)])


def feedback_prompt(rec: CandidateRecord, profile: GpuProfile, next_step: str = "") -> str:
    return render("feedback.md.j2", cand=rec, gpu_name=profile.name.upper(), next_step=next_step)


def malformed_prompt(detail: str) -> str:
    return render("malformed.md.j2", detail=detail)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan
