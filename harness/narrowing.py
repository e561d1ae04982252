"""A narrow-scope copy of a candidate: the same kernel.py under a scope inside the original's.

The RFC lets a kernel's scope be narrow. A kernel that wins only at one shape or batch range
cannot pass the perf gate over its whole scope (the geomean is taken over every point), but
its narrow copy can: `harness narrow OP ID --shapes mla_qkv_a` writes that copy as a new
candidate (a new id: the id hashes the source and the scope), with the original as parent.
Promoted, it runs beside the op's broad kernel, which keeps every call outside its scope
(harness/registry.py: the most specific entry covering a call runs it).
"""
from __future__ import annotations

from typing import Any

from .errors import UserError

_KEYS = ("archs", "tp", "batch", "dtypes", "state_dtypes", "shapes")


def narrowed_scope(scope: Any, changes: dict[str, Any], state_dtypes: tuple[str, ...] = ()) -> Any:
    """`scope` (a toolchain Scope) with `changes` applied; UserError unless the result is inside
    the original and smaller than it. `state_dtypes`: the op's, for a scope that names none."""
    from .registry import KernelScope
    from .toolchain.candidate import Scope

    unknown = sorted(set(changes) - set(_KEYS))
    if unknown:
        raise UserError(f"no scope key {', '.join(unknown)} (keys: {', '.join(_KEYS)})")
    if changes.get("shapes") and not scope.shapes:
        raise UserError("the candidate's scope names no shapes (the op's default shape only): there are none to narrow to")
    odd = sorted(set(changes.get("state_dtypes") or ()) - set(scope.state_dtypes or state_dtypes))
    if odd:
        raise UserError(f"state dtype {', '.join(odd)} is not in the candidate's scope")
    new = Scope.from_json({**scope.to_json(), **{k: list(v) for k, v in changes.items()}})
    old_k, new_k = KernelScope.from_json(scope.to_json()), KernelScope.from_json(new.to_json())
    if not old_k.covers(new_k):
        raise UserError(f"the narrowed scope {_show(new)} is not inside the candidate's {_show(scope)}")
    if new == scope:
        raise UserError(f"the narrowed scope equals the candidate's own {_show(scope)}: nothing to narrow")
    return new


def narrow_candidate(op: str, ref: str, changes: dict[str, Any], root=None):
    """Write the narrow copy of candidate `ref` of `op` (kernels_generated/<op>/<new id>/) and
    return it; the same request twice returns the same folder."""
    import reference_impls

    from .toolchain.candidate import Provenance, create_candidate, load_candidate

    cand = load_candidate(op, ref)
    scope = narrowed_scope(cand.scope, changes, tuple(reference_impls.get(op).state_dtypes))
    p = cand.provenance
    prov = Provenance(author=p.author, parent=cand.id, prompt_hash=p.prompt_hash, template=p.template)
    return create_candidate(op, cand.source, scope, prov, root=root)


def _show(scope: Any) -> str:
    s = scope.to_json()
    parts = [f"{k}={s[k]}" for k in _KEYS if s.get(k)]
    return "{" + ", ".join(parts) + "}"

