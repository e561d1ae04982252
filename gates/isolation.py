"""Isolation gate: the candidate's change stays inside its own folder, checked with git.

Relative to the base commit, a candidate may add or change files only under
kernels_generated/<op>/<candidate>/ and, at promotion, kernels_generated/promoted.json by an
entry of this op naming this candidate (replacing at most the op's entry of the same scope, or
this candidate's own). A change to a frozen path (gate code, gate config,
references, any shared module) is an isolation failure: a candidate must not pass by
moving the goalposts. The frozen files' hashes also go into the evidence record.
(The code policy is the `static` gate; the runtime proof, trace counters > 0, is checked
by `numerics_model` on the decode path.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from . import GateContext, GateName, GateResult, Verdict

MANIFEST = "kernels_generated/promoted.json"


@dataclass
class IsolationFindings:
    outside: list[str] = field(default_factory=list)       # changed paths outside the candidate
    frozen: list[str] = field(default_factory=list)        # changed frozen paths (subset of outside)
    manifest: list[str] = field(default_factory=list)      # problems with the manifest change


def _entries_by_op(raw: bytes | None) -> dict[str, list[dict]]:
    """op -> its entries (an op may hold several, with different scopes), each list sorted."""
    if raw is None or not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError(f"{MANIFEST} must be a JSON list")
    out: dict[str, list[dict]] = {}
    for e in data:
        if isinstance(e, dict):
            out.setdefault(str(e.get("op")), []).append(e)
    return {op: sorted(es, key=lambda e: json.dumps(e, sort_keys=True)) for op, es in out.items()}


def check_manifest_change(op: str, candidate_id: str, before: bytes | None, after: bytes | None) -> list[str]:
    """Only this op's entries may change: an entry naming this candidate may appear, replacing
    at most the op's entry of the same scope or this candidate's own; nothing else goes."""
    try:
        b, a = _entries_by_op(before), _entries_by_op(after)
    except (ValueError, json.JSONDecodeError) as exc:
        return [f"{MANIFEST} is not a valid manifest: {exc}"]
    problems = []
    for other in sorted(set(a) | set(b)):
        if other != op and a.get(other) != b.get(other):
            problems.append(f"{MANIFEST}: entry of another op ('{other}') changed")
    added = [e for e in a.get(op, []) if e not in b.get(op, [])]
    removed = [e for e in b.get(op, []) if e not in a.get(op, [])]
    for e in added:
        if e.get("candidate") != candidate_id:
            problems.append(f"{MANIFEST}: entry for {op} names '{e.get('candidate')}', not this candidate")
    scopes = [e.get("scope") for e in added if e.get("candidate") == candidate_id]
    for e in removed:
        if e.get("candidate") != candidate_id and e.get("scope") not in scopes:
            problems.append(f"{MANIFEST}: entry for {op} naming '{e.get('candidate')}' removed, "
                            "and this candidate does not take its scope")
    return problems


def decide(op: str, candidate_id: str, changed: list[str], frozen_prefixes: list[str],
           manifest_before: bytes | None, manifest_after: bytes | None) -> tuple[Verdict, list[str], IsolationFindings]:
    """Pure decision on a list of changed paths and the manifest before/after."""
    own = f"kernels_generated/{op}/{candidate_id}/"
    f = IsolationFindings()
    for path in changed:
        if path.startswith(own):
            continue
        if path == MANIFEST:
            f.manifest = check_manifest_change(op, candidate_id, manifest_before, manifest_after)
            continue
        f.outside.append(path)
        if any(path == p.rstrip("/") or path.startswith(p) for p in frozen_prefixes):
            f.frozen.append(path)
    reasons = [f"frozen path changed (gate code, config, reference or shared module): {p}" for p in f.frozen]
    reasons += [f"change outside the candidate folder: {p}" for p in f.outside if p not in f.frozen]
    reasons += f.manifest
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons, f


def run(ctx: GateContext) -> GateResult:
    from ._git import Git, GitError

    try:
        g = Git(ctx.root)
    except GitError as exc:
        return GateResult(GateName.ISOLATION.value, Verdict.NOT_RUN, [f"no git history to check against: {exc}"])
    try:
        base = g.rev(ctx.base) if ctx.base else g.default_base()
    except GitError as exc:
        if ctx.base:                # a base the caller named that is no commit: a broken request, not a missing tool
            return GateResult(GateName.ISOLATION.value, Verdict.ERROR, [f"base '{ctx.base}' is not a commit: {exc}"])
        return GateResult(GateName.ISOLATION.value, Verdict.NOT_RUN, [f"no git history to check against: {exc}"])
    if not ctx.candidate_dir.is_dir():
        return GateResult(GateName.ISOLATION.value, Verdict.FAIL, [f"candidate folder {ctx.candidate_dir} does not exist"])
    changed = g.changed_paths(base)
    manifest_path = ctx.root / MANIFEST
    after = manifest_path.read_bytes() if manifest_path.exists() else None
    verdict, reasons, findings = decide(ctx.op, ctx.candidate_id, changed,
                                        list(ctx.config.get("isolation", "frozen_paths")),
                                        g.show(base, MANIFEST), after)
    numbers = {"base_commit": base, "git_backend": g.backend, "changed_paths": len(changed),
               "outside_paths": findings.outside, "frozen_paths_changed": findings.frozen}
    return GateResult(GateName.ISOLATION.value, verdict, reasons, numbers)
