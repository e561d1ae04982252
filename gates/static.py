"""Static gate (the code policy of isolation): the candidate folder loads and validates
(content id matches kernel.py + scope) and kernel.py passes the toolchain's ast checks:
only kernel imports, no torch compute on the hot path, no file/env/network access, no
dynamic code, no try/except fallback (harness/toolchain/static_check.py owns the rules)."""
from __future__ import annotations

from typing import Any

from . import GateContext, GateName, GateResult, Verdict


def decide(numbers: dict[str, Any]) -> tuple[Verdict, list[str]]:
    """Pass only when the folder loaded and the ast checks found nothing."""
    reasons = []
    if numbers.get("load_error"):
        reasons.append(f"candidate folder invalid: {numbers['load_error']}")
    if not numbers.get("checked"):
        reasons.append("static checks did not run")
    reasons += [f"static: {f}" for f in numbers.get("findings", [])]
    return (Verdict.FAIL if reasons else Verdict.PASS), reasons


def run(ctx: GateContext) -> GateResult:
    from harness.errors import UserError
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.static_check import check_candidate

    numbers: dict[str, Any] = {"checked": False, "findings": [], "load_error": ""}
    try:
        cand = load_candidate(ctx.op, ctx.candidate_dir)
    except UserError as exc:
        numbers["load_error"] = str(exc)
    else:
        report = check_candidate(cand)
        numbers.update(checked=True, findings=[str(f) for f in report.findings],
                       rules=sorted({f.rule for f in report.findings}))
    verdict, reasons = decide(numbers)
    return GateResult(GateName.STATIC.value, verdict, reasons, numbers)
