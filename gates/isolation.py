"""Isolation gate: the candidate's change stays inside its own folder, checked with git.

Relative to the base commit, a candidate may add or change files only under
kernels_generated/<op>/<candidate>/ and, at promotion, this op's one entry of
kernels_generated/promoted.json. A change to a frozen path (gate code, gate config,
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


def _entries_by_op(raw: bytes | None) -> dict[str, dict]:
    if raw is None or not raw.strip():
        return {}
    data = json.loads(raw)
    if not isinstance(data, list):
        raise ValueError(f"{MANIFEST} must be a JSON list")
    return {str(e.get("op")): e for e in data if isinstance(e, dict)}


def check_manifest_change(op: str, candidate_id: str, before: bytes | None, after: bytes | None) -> list[str]:
    """At most this op's entry may change, and only to point at this candidate."""
    try:
        b, a = _entries_by_op(before), _entries_by_op(after)
    except (ValueError, json.JSONDecodeError) as exc:
        return [f"{MANIFEST} is not a valid manifest: {exc}"]
    problems = []
    for other in sorted(set(a) | set(b)):
        if other != op and a.get(other) != b.get(other):
            problems.append(f"{MANIFEST}: entry of another op ('{other}') changed")
    if op in a and a.get(op) != b.get(op) and a[op].get("candidate") != candidate_id:
        problems.append(f"{MANIFEST}: entry for {op} names '{a[op].get('candidate')}', not this candidate")
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
