"""The end of a run: full gates for the best verified candidate, promotion on request.
Calls gates/ and harness/promotion.py through their Python API."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import paths

if TYPE_CHECKING:
    from gates import GateResult


def isolation_as_pr(ctx) -> "GateResult":
    """The isolation gate on the change a promotion of this candidate would bring: HEAD (the
    committed branch, checked against its base as usual) plus only the candidate's folder, in
    a throwaway git worktree. The run's other candidate folders and uncommitted work are not
    part of that change (harness.promotion commits only the candidate and the manifest on
    top of HEAD), so they must not fail it; committed changes to frozen paths still do."""
    from gates import GateName, GateResult, Verdict
    from gates._git import Git, GitError
    from gates.suite import run_gates

    try:
        g = Git(ctx.root)
        base = g.rev(ctx.base) if ctx.base else g.default_base()
        head = g.rev("HEAD")
    except GitError as exc:
        return GateResult(GateName.ISOLATION.value, Verdict.NOT_RUN, [f"no git history to check against: {exc}"])
    with tempfile.TemporaryDirectory(prefix="harness-pr-") as tmp:
        tree = Path(tmp) / "tree"
        try:
            g.run("worktree", "add", "--detach", "--quiet", str(tree), head)
        except GitError as exc:
            return GateResult(GateName.ISOLATION.value, Verdict.ERROR, [f"could not build the PR-shaped tree: {exc}"])
        try:
            rel = ctx.candidate_dir.relative_to(ctx.root)
            shutil.copytree(ctx.candidate_dir, tree / rel, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "evidence"))
            (res,) = run_gates(dataclasses.replace(ctx, root=tree, base=base), only=[GateName.ISOLATION])
        finally:
            g.run("worktree", "remove", "--force", str(tree))
    res.numbers["pr_shaped"] = {"head": head, "adds_only": rel.as_posix()}
    return res


def run_full_gates(op: str, candidate_id: str, model_config: str | None = None) -> dict[str, Any]:
    """Run every gate, write the evidence record, return {verdicts, passed, evidence}.
    Isolation judges the PR-shaped change (isolation_as_pr); without a GPU the GPU gates are
    NOT_RUN at once (the real config needs a CUDA GPU). `model_config` defaults to the
    K3 rank preset whose decode path calls `op`, at the candidate's TP (candidate_gate_model_config,
    as scripts/gpu/gate.sh);
    "tiny" is only a smoke that the gates report NOT_RUN, with which no candidate could pass."""
    from gates import ALL_GATES, GateContext, GateName
    from gates.config import config_path, load_config
    from gates.suite import gpu_available, run_gates
    from harness import evidence
    from harness.model.config import candidate_gate_model_config

    root = paths.root()
    model_config = model_config or candidate_gate_model_config(root, op, candidate_id)
    cfg = load_config(config_path(root))
    ctx = GateContext(op=op, candidate_id=candidate_id, root=root, config=cfg,
                      device="cuda" if gpu_available() else "cpu", model_config=model_config)
    results = [isolation_as_pr(ctx)] + run_gates(ctx, only=[g for g in ALL_GATES if g is not GateName.ISOLATION])
    rec = evidence.build(root, op, candidate_id, results, cfg.version)
    path = evidence.write(rec, root)
    verdicts = {r.gate: r.verdict.value for r in results}
    reasons = {r.gate: list(r.reasons)[:3] for r in results if r.reasons}
    return {"candidate": candidate_id, "verdicts": verdicts, "reasons": reasons,
            "passed": all(v == "pass" for v in verdicts.values()), "evidence": str(path)}


def promote(op: str, candidate_id: str) -> dict[str, Any]:
    from harness.promotion import promote as _promote

    res = _promote(paths.root(), op, candidate_id)
    return {"candidate": candidate_id, "branch": res.branch, "commit": res.commit}
