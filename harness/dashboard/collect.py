"""Collecting the dashboard's views from the folder layout: kernels_generated/<op>/<id>/
(candidates and their evidence), kernels_generated/promoted.json, runs/<run-id>/ and the
promotion branches in git. Read-only: nothing under the root is written or locked."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import evidence as ev
from ..errors import UserError
from . import extract
from .history import promotion_history
from .model import (Badge, CandidateView, EvidenceView, GateView, GpuBenchmarks, OpView, PromotionState, RunView,
                    SiteData)
from .runs import collect_runs

GATE_ORDER = ("isolation", "static", "scope", "numerics_unit", "numerics_model", "perf_sweep")


def collect(root: Path) -> SiteData:
    import reference_impls

    warnings: list[str] = []
    manifest, promoted = _manifest(root, warnings)
    runs = collect_runs(root / "runs", warnings)
    run_recs = _run_candidate_records(runs)
    history, note = promotion_history(root)
    ops = []
    for name in reference_impls.OP_NAMES:
        defn = reference_impls.get(name)
        cands = _candidates(root, name, promoted, run_recs, warnings)
        op = OpView(name=name, summary=defn.summary, incumbent=manifest.get(name), best=_best(cands),
                    state=PromotionState.NONE, candidates=cands)
        op.state = _state(op)
        op.last_promotion = next((h for h in history if h.op == name), None)
        ops.append(op)
    for extra in sorted(p.name for p in (root / "kernels_generated").glob("*") if p.is_dir()):
        if extra not in reference_impls.OP_NAMES and not extra.startswith("."):
            warnings.append(f"kernels_generated/{extra}: not an op of the catalogue (ignored)")
    cards, layers, others = _benchmarks(root, warnings)
    return SiteData(root=str(root), generated_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    ops=ops, runs=runs, history=history, history_note=note, warnings=warnings,
                    benchmarks=cards, layer_tables=layers, coverage=_coverage(root, cards, warnings),
                    ledgers=_ledgers(root, reference_impls.OP_NAMES, warnings), other_gpus=others)


def _coverage(root: Path, cards: list[Any], warnings: list[str]) -> dict[str, Any]:
    """Per op with a benchmark card: harness.scorecard.Coverage, where its promoted kernels run
    in the op's whole sweep (the Benchmarks page prints it under the op's first card)."""
    if not cards:
        return {}
    from .. import scorecard

    try:
        return {c.op: c for c in scorecard.coverages(root, sorted({card.op for card in cards}))}
    except Exception as exc:  # noqa: BLE001 - the page still builds without the line
        warnings.append(f"benchmarks: the coverage of the promoted kernels failed: {type(exc).__name__}: {exc}")
        return {}


def _ledgers(root: Path, ops, warnings: list[str]) -> dict[str, list[Any]]:
    """Each op's ideas measured on a GPU and not kept (prompts/kernels/<op>/measured.json, the ledger the
    drafting prompt lists), for the Benchmarks page: why a target is still missed, and what was
    tried. Ops without a ledger are left out; a malformed one is a warning, not a failed build."""
    from ..agent.ledger import load_ledger

    out: dict[str, list[Any]] = {}
    for op in ops:
        try:
            entries = load_ledger(op, root)
        except UserError as exc:
            warnings.append(f"ledger: {exc}")
            continue
        if entries:
            out[op] = entries
    return out


def _benchmarks(root: Path, warnings: list[str]) -> tuple[list[Any], list[Any], list[GpuBenchmarks]]:
    """The scorecards of the committed benchmark runs under results/ (harness.scorecard), the files
    read once: the H200's cards (one per promoted kernel) and per-layer tables (one per model config
    and context), then one GpuBenchmarks per other card whose runs measured a promoted kernel or a
    layer. A root without results/ has none; a run that cannot be read becomes a warning, not a
    failed build."""
    if not (root / "results").is_dir():
        return [], [], []
    from .. import scorecard

    try:
        everything = scorecard.all_json_files(root / "results", root)
        by_gpu = {}
        for g in scorecard.GPUS:
            files = scorecard.on_gpu(everything, g)
            by_gpu[g] = (scorecard.scorecards(root, files=files, gpu_name=g),
                         scorecard.layer_tables(root, files=files, gpu_name=g))
    except Exception as exc:  # noqa: BLE001 - the other pages still build; the reviewer sees why this one is empty
        warnings.append(f"benchmarks: the scorecard of results/ failed: {type(exc).__name__}: {exc}")
        return [], [], []
    cards, layers = by_gpu.pop(scorecard.DEFAULT_GPU)
    others = [GpuBenchmarks(g, c, t) for g, (c, t) in by_gpu.items() if t or any(card.measured for card in c)]
    return cards, layers, others


def _manifest(root: Path, warnings: list[str]) -> tuple[dict[str, str], set[str]]:
    """(op -> its broadest promoted candidate, the incumbent; every promoted candidate id)."""
    from ..promotion import primary_entries, read_manifest

    try:
        entries = read_manifest(root)
        return {op: e["candidate"] for op, e in primary_entries(entries).items()}, {e["candidate"] for e in entries}
    except UserError as exc:
        warnings.append(str(exc))
        return {}, set()


def _run_candidate_records(runs: list[RunView]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """candidate id -> [(run id, its CandidateRecord JSON as replayed from the run's log)]."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for r in runs:
        for cid, rec in r.records.items():
            out.setdefault(cid, []).append((r.id, rec))
    return out


def _candidates(root: Path, op: str, promoted: set[str], run_recs, warnings: list[str]) -> list[CandidateView]:
    from ..toolchain.candidate import KERNEL_FILE, scan_candidates

    scan = scan_candidates(op, root / "kernels_generated")
    out = []
    for cand in scan.candidates:
        p = cand.provenance
        out.append(CandidateView(op=op, id=cand.path.name, promoted=cand.path.name in promoted, author=p.author,
                                 parent=p.parent, created_utc=p.created_utc, template=p.template,
                                 scope=cand.scope.to_json(), source=cand.source))
    for folder, why in scan.unreadable:
        k = folder / KERNEL_FILE
        out.append(CandidateView(op=op, id=folder.name, promoted=folder.name in promoted, load_error=why,
                                 source=k.read_text(errors="replace") if k.is_file() else ""))
        warnings.append(f"{op}/{folder.name}: {why}")
    for cv in out:
        _evidence(root, cv)
        for run_id, rec in run_recs.get(cv.id, []):
            cv.runs.append(run_id)
            cv.compile += extract.run_compile_facts(rec, run_id)
    return sorted(out, key=lambda c: (c.created_utc, c.id))


def _evidence(root: Path, cv: CandidateView) -> None:
    """Every record of the candidate, and the latest verdict per gate (fresh records win
    over stale ones, as promotion judges)."""
    try:
        now = ev.current_pins(root, cv.op, cv.id)
    except Exception:  # noqa: BLE001 - a root without gates/ or references: freshness unknown
        now = None
    latest: dict[str, tuple[bool, str, GateView]] = {}
    for path, rec in ev.records(root, cv.op, cv.id):
        if isinstance(rec, ev.EvidenceError):
            cv.evidence.append(EvidenceView(file=path.name, error=str(rec)))
            continue
        per_gate = ev.stale_reasons(rec, now) if now is not None else {}
        stale = list(dict.fromkeys(r for why in per_gate.values() for r in why))
        hw = rec.hardware or {}
        cv.evidence.append(EvidenceView(file=path.name, created_utc=rec.created_utc, host=rec.host,
                                        gpu=str(hw.get("gpu", "no GPU")), hardware=hw,
                                        gate_config_version=rec.gate_config_version, head_commit=rec.head_commit,
                                        verdicts={g.gate: g.verdict for g in rec.gates}, stale=stale))
        for g in rec.gates:
            gstale = per_gate.get(g.gate, [])
            gv = GateView(gate=g.gate, badge=Badge(g.verdict), record=path.name, created_utc=rec.created_utc,
                          host=rec.host, stale=gstale, reasons=list(g.reasons), numbers=g.numbers, duration_s=g.duration_s)
            rank = (not gstale, rec.created_utc)
            if g.gate not in latest or rank >= latest[g.gate][:2]:
                latest[g.gate] = (*rank, gv)
    cv.evidence.sort(key=lambda e: e.created_utc or e.file, reverse=True)
    cv.gates = {g: (latest[g][2] if g in latest else GateView(g, Badge.MISSING)) for g in GATE_ORDER}
    for gate_name, (_, _, gate_view) in latest.items():
        if gate_name not in cv.gates:
            cv.gates[gate_name] = gate_view
    perf = cv.gates["perf_sweep"]
    if perf.badge is not Badge.MISSING:
        cv.sweep = extract.sweep_points(perf.numbers)
        cv.geomean_speedup = extract._num(perf.numbers.get("geomean_speedup"))
        layer = perf.numbers.get("layer")
        cv.layer = layer if isinstance(layer, dict) else None
    scope = cv.gates["scope"]
    if scope.badge is not Badge.MISSING:
        cv.compile += extract.compile_facts(scope.numbers, f"scope gate {scope.record}")
    model = cv.gates["numerics_model"]
    if model.badge is not Badge.MISSING:
        cv.model_runs = extract.model_runs(model.numbers)
        fused = model.numbers.get("fused_kernels_off")
        cv.model_fused_off = [str(f) for f in fused] if isinstance(fused, list) else []
        cv.drift = extract.drift_series(model.numbers)
    for name, gv in cv.gates.items():
        cv.counters += extract.counter_rows(gv.numbers, name)


def _best(cands: list[CandidateView]) -> str | None:
    """Highest geometric-mean speedup over the sweep; without sweeps, most gates passed."""
    timed = [c for c in cands if c.geomean_speedup is not None and not c.load_error]
    if timed:
        return max(timed, key=lambda c: (c.all_pass_fresh, c.geomean_speedup, c.n_pass)).id
    gated = [c for c in cands if c.n_pass and not c.load_error]
    return max(gated, key=lambda c: (c.n_pass, c.created_utc)).id if gated else None


def _state(op: OpView) -> PromotionState:
    if op.incumbent:
        return PromotionState.PROMOTED
    if any(c.all_pass_fresh for c in op.candidates):
        return PromotionState.READY
    if any(c.evidence for c in op.candidates):
        return PromotionState.GATED
    return PromotionState.CANDIDATES if op.candidates else PromotionState.NONE
