"""The end of a run: full gates for the best verified candidate, promotion on request.
Calls gates/ and harness/promotion.py through their Python API."""
from __future__ import annotations

from typing import Any

from .. import paths

# The K3 config numerics_model and perf_sweep's layer timing run on (as scripts/gpu/gate_*.sh):
# "tiny" is only a smoke that the gates report NOT_RUN, so with it no candidate could pass.
MODEL_CONFIG = "k3-tp8-rank"


def run_full_gates(op: str, candidate_id: str, model_config: str = MODEL_CONFIG) -> dict[str, Any]:
    """Run every gate, write the evidence record, return {verdicts, passed, evidence}.
    Without a GPU the GPU gates are NOT_RUN at once (the real config needs a CUDA GPU)."""
    from gates import GateContext
    from gates.config import config_path, load_config
    from gates.suite import gpu_available, run_gates
    from harness import evidence

    root = paths.root()
    cfg = load_config(config_path(root))
    ctx = GateContext(op=op, candidate_id=candidate_id, root=root, config=cfg,
                      device="cuda" if gpu_available() else "cpu", model_config=model_config)
    results = run_gates(ctx)
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
