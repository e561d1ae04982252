"""A throwaway project root with fixture records written by the real writers: candidates
(create_candidate), evidence (gates' decide() + harness.evidence build/write), a promotion
(harness.promotion.promote, a real commit on promote/<op>/<id>) and an agent run (RunLog
with the agent's event kinds and records). A format change in any of them breaks these
tests instead of silently breaking the dashboard."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
OP = "moe_router"
CPU_OP = "rmsnorm"
SECRET = "sk-dashTEST0123456789abcdefXYZ"
RUN_ID = "20260101-000000-moe_router-abc123"


def measurements() -> dict[str, Any]:
    return json.loads((FIXTURES / "measurements.json").read_text())


def source(name: str) -> str:
    return (FIXTURES / f"{name}.py.txt").read_text()


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def _candidate(root: Path, op: str, src: str, scope: dict, author: str, parent: str | None = None) -> str:
    from harness.toolchain.candidate import Provenance, Scope, create_candidate

    return create_candidate(op, src, Scope.from_json(scope), Provenance(author=author, parent=parent),
                            root=root / "kernels_generated").id


def perf_points(root: Path, cid: str, times: dict, incumbent: dict) -> list[dict[str, Any]]:
    """perf_sweep's measured points, one per required point of the scope (gates.points.key)."""
    import reference_impls
    from gates.points import key, scope_points
    from harness.toolchain.candidate import load_candidate

    m = measurements()
    cand = load_candidate(OP, root / "kernels_generated" / OP / cid)
    batches = [1, 2, 4, 8, 16, 32, 64]
    out = []
    for p in scope_points(reference_impls.get(OP), cand.scope):
        i = batches.index(p.batch)
        out.append({"point": key(p), "incumbent_us": incumbent[str(p.tp)][i], "candidate_us": times[str(p.tp)][i],
                    "noise_rel": m["noise_rel"], "floor_us": m["floor_us"][str(p.tp)][i]})
    return out


# per-step expert flips of the kernel and the noise path in v2's long-generation run, and the
# fused kernels its model gate switched off (what the candidate page shows beside the drift)
FLIPS = {"kernel": [0, 1, 0, 0, 2, 0, 1], "noise": [1, 0, 0, 1, 0, 0, 0]}
FUSED_OFF = ["gemm_situ_and_mul"]


def gate_results(root: Path, cid: str, times: dict, incumbent: dict, drift: bool) -> list:
    import reference_impls
    from gates import GateContext, GateResult, Verdict, isolation, load_config, numerics_model, perf_sweep, scope, static
    from gates.points import key, scope_points
    from harness.toolchain.candidate import load_candidate

    m = measurements()
    cfg = load_config(root / "gates" / "gate_config.toml")
    ctx = GateContext(op=OP, candidate_id=cid, root=root, config=cfg)
    cand = load_candidate(OP, root / "kernels_generated" / OP / cid)
    pts = [key(p) for p in scope_points(reference_impls.get(OP), cand.scope)]
    samples = [{"point": p, "kind": "random", "seed": 1000 * i + j, "ok": True, "mutated": [], "deterministic": True}
               for i, p in enumerate(pts) for j in range(10)]
    samples += [{"point": p, "kind": k, "seed": 7, "ok": True, "mutated": [], "deterministic": True}
                for p in pts for k in ("ties", "large", "equal_rows")]
    runs = []
    for k in ("long_generation", "long_context", "sampling", "structured"):
        r = {"kind": k, "tokens": 1024, "context": 32768, "greedy_agreement": 1.0, "sampling_agreement": 0.99,
             "max_kl": max(m["drift"]["kl"]), "max_logit_rel_err": max(m["drift"]["logit_rel_err"]),
             "kernel_calls_on": 1024, "kernel_calls_off": 0, "valid": True,
             "trace": {"on": m["counters"], "off": [{"op": OP, "outcome": "fallback", "reason": "disabled", "count": 1027}]}}
        if drift and k == "long_generation":
            r["kl_per_step"] = m["drift"]["kl"]
            r["logit_rel_err_per_step"] = m["drift"]["logit_rel_err"]
            r["expert_flips_per_step"] = FLIPS["kernel"]
            r["noise"] = {"calls": 1024, "max_kl": max(m["drift"]["kl"]), "expert_flips_per_step": FLIPS["noise"]}
        runs.append(r)
    scope_numbers = {"compiles": [{"arch": "sm_90a", "tp": tp, "static": {}, "verdict": "OK", "message": "",
                                   "compile_s": m["compile"]["seconds"]} for tp in (8, 16)],
                     "dispatch": [{"case": "inside B=1 TP8", "expected_outcome": "kernel", "expected_reason": "in_scope",
                                   "got_outcome": "kernel", "got_reason": "in_scope"},
                                  {"case": "above B=65", "expected_outcome": "fallback", "expected_reason": "batch",
                                   "got_outcome": "fallback", "got_reason": "batch"}]}
    perf = perf_points(root, cid, times, incumbent)
    layer = {"on_us": 392.0, "off_us": 400.0, "noise_rel": 0.004, "mode": "graph", "graph_error": ""}
    pv, preasons, derived = perf_sweep.decide(perf, layer, pts, cfg)
    mv, mreasons = numerics_model.decide(runs, cfg)
    sv, sreasons = scope.decide(scope_numbers, ["sm_90a"], [8, 16])
    return [isolation.run(ctx), static.run(ctx), GateResult("scope", sv, sreasons, scope_numbers),
            GateResult("numerics_unit", Verdict.PASS, [], {"samples": samples}),
            GateResult("numerics_model", mv, mreasons, {"model_config": "k3-tp8-rank", "runs": runs,
                                                         **({"fused_kernels_off": FUSED_OFF} if drift else {})}),
            GateResult("perf_sweep", pv, preasons, {"points": perf, "layer": layer, "required": pts, **derived})]


def write_run(root: Path, v2: str) -> None:
    """An LLM run that drafted v2 in round 1, with two provider calls (one retried)."""
    from harness.agent.records import CompileInfo, EvalInfo, StageStatus, Timing
    from harness.agent.runlog import EventKind, RunLog

    m = measurements()
    log = RunLog.create(root / "runs", RUN_ID)
    log.append(EventKind.RUN_STARTED, config={"op": OP, "agent": "openai", "rounds": 1, "candidates_per_round": 1},
               run_id=RUN_ID, gpu_available=True)
    log.append(EventKind.ROUND_STARTED, round=1)
    log.append(EventKind.LLM_CALL, provider="openai", model="gpt-test", attempt=1, outcome="retry", detail="HTTP 429",
               retry_after_s=1.0, input_tokens=0, output_tokens=0, cost_usd=None)
    log.append(EventKind.LLM_CALL, provider="openai", model="gpt-test", attempt=2, outcome="ok", detail="",
               retry_after_s=None, input_tokens=1200, output_tokens=800, cost_usd=0.0125)
    log.append(EventKind.DRAFT, round=1, slot=0, id=v2, author="llm:openai/gpt-test", prompt_hash=None, parent=None,
               template=None, files=[])
    log.append(EventKind.STAGE, id=v2, stage="static", result={"ok": True, "problems": []})
    c = m["compile"]
    log.append(EventKind.STAGE, id=v2, stage="compile",
               result=asdict(CompileInfo("sm_90a", StageStatus.OK, c["registers"], c["spill_bytes"], c["ld128"], c["seconds"])))
    timings = [Timing(b, 8, t) for b, t in zip([1, 2, 4, 8, 16, 32, 64], m["v2_us"]["8"])]
    log.append(EventKind.STAGE, id=v2, stage="evaluate", result=asdict(EvalInfo(StageStatus.OK, "PASS", "", [], timings)))
    score = math.exp(sum(math.log(t) for t in m["v2_us"]["8"]) / 7)
    log.append(EventKind.STAGE, id=v2, stage="score", result={"score": score, "kind": "time_us"})
    log.append(EventKind.ROUND_FINISHED, round=1, best=v2, best_score=score)
    log.append(EventKind.RUN_FINISHED, summary={})


def build_root(root: Path) -> dict[str, str]:
    """The fixture project under `root`; returns the candidate ids."""
    from harness import evidence as ev
    from harness.promotion import promote

    m = measurements()
    root.mkdir(parents=True, exist_ok=True)
    for d in ("gates", "harness", "reference_impls"):
        shutil.copytree(REPO / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    (root / ".gitignore").write_text("__pycache__/\n/runs/\n")
    v1 = _candidate(root, OP, source("kernel_v1"), m["scope"], "human")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "test")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    ev.write(ev.build(root, OP, v1, gate_results(root, v1, m["v1_us"], m["reference_us"], drift=False), 1,
                      hardware={"gpu": "NVIDIA H200", "sm_count": 132}), root)
    promote(root, OP, v1)
    v2 = _candidate(root, OP, source("kernel_v2"), m["scope"], "llm:openai/gpt-test", parent=v1)
    ev.write(ev.build(root, OP, v2, gate_results(root, v2, m["v2_us"], m["v1_us"], drift=True), 1,
                      hardware={"gpu": "NVIDIA H200", "sm_count": 132}), root)
    cpu_scope = {"archs": ["sm_90a"], "tp": [8], "batch": [1, 8], "dtypes": ["bf16"], "state_dtypes": [], "shapes": []}
    v3 = _candidate(root, CPU_OP, source("kernel_v1"), cpu_scope, "template")
    write_run(root, v2)
    write_benchmarks(root, v1)
    write_ledgers(root)
    return {"v1": v1, "v2": v2, "v3": v3}


# Ledgers (prompts/kernels/<op>/measured.json) written by harness.agent.ledger.add_entry, citing a committed
# record: two ideas for the promoted op, one for an op without a benchmark card, and one malformed ledger.
LEDGER = [("split-K over 4-CTA clusters", "slower", "1.12x v1 at B=1-64"),
          ("x staged by TMA multicast", "no_gain", "0.99x v1, under the gate's 5%")]
CPU_LEDGER = ("one warp a row", "mixed", "0.9x at B=1, 1.2x at B=64")
BAD_LEDGER_OP = "situ_and_mul"


def write_ledgers(root: Path) -> None:
    from harness.agent.ledger import Measured, Outcome, add_entry, ledger_path

    record = "results/h200/bench.json"
    for idea, outcome, numbers in LEDGER:
        add_entry(OP, Measured(idea, Outcome(outcome), numbers, record), root)
    idea, outcome, numbers = CPU_LEDGER
    add_entry(CPU_OP, Measured(idea, Outcome(outcome), numbers, record), root)
    bad = ledger_path(BAD_LEDGER_OP, root)
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text('{"entries": [{"idea": "no outcome"}]}')


# The benchmark scripts' JSON (scripts/gpu/bench_kernels.py, bench_layers.py) is written on a GPU only,
# so these are their formats written out by hand: the fields harness.scorecard reads.
BENCH = {1: {"ours": 6.0, "compile": 14.0, "floor": 3.2, "copy": 4.5},     # floor MISS*: 3.2 + 1.0 > 1.3 x 3.2
         64: {"ours": 12.0, "compile": 20.0, "floor": 10.0, "copy": 11.0}}  # floor ok; compile 1.67x < 2x: MISS
BENCH_LAUNCH_US = 1.0
H100_OURS_US = {1: 7.77, 64: 66.6}               # the fixture's H100 run: ours at B = 1 and 64
LAYERS = {(1, 1): (900.0, 600.0, 120, 40), (64, 1): (5000.0, 4800.0, 300, 200)}   # (off us, on us, kernels off, on)


def write_benchmarks(root: Path, promoted_id: str) -> None:
    res = root / "results" / "h200"
    res.mkdir(parents=True)
    rows = [{"tp": 8, "batch": b, "shape": "", "state_dtype": "", "floor_us": v["floor"],
             "times": {"eager": {"median_us": 50.0}, "compile": {"median_us": v["compile"]},
                       "copy": {"median_us": v["copy"]}, f"fam:{promoted_id[:6]}": {"median_us": v["ours"]}}}
            for b, v in BENCH.items()]
    rows[0]["eager_rotation_bytes"] = 64 * 10_000          # B=1's eager on fewer sets, in L2 (--eager-copies)
    (res / "bench.json").write_text(json.dumps({
        "device": "NVIDIA H200", "launch_floor_us": BENCH_LAUNCH_US,
        "ops": {OP: {"op": OP, "candidates": {f"fam:{promoted_id[:6]}": {"id": promoted_id}}, "rows": rows}}}))
    h100 = root / "results" / "h100"                 # the same kernel on another card: its own page
    h100.mkdir()
    (h100 / "bench.json").write_text(json.dumps({
        "device": "NVIDIA H100 80GB HBM3", "launch_floor_us": BENCH_LAUNCH_US,
        "ops": {OP: {"op": OP, "candidates": {f"fam:{promoted_id[:6]}": {"id": promoted_id}},
                     "rows": [{**r, "times": {**r["times"], f"fam:{promoted_id[:6]}": {"median_us": H100_OURS_US[r["batch"]]}}}
                              for r in rows]}}}))
    lrows = [{"batch": b, "layer": layer, "attn": "kda", "ffn": "moe", "kernels": side, "eager_us": 2 * us,
              "graph_us": us, "gpu_kernels": k}
             for (b, layer), (off, on, k_off, k_on) in LAYERS.items()
             for side, us, k in (("off", off, k_off), ("on", on, k_on))]
    (res / "bench_layers_k3-test.json").write_text(json.dumps({
        "config": "k3-test", "rows": lrows, "promoted": {OP: promoted_id},
        "registry": {"on": {f"{OP} kernel in_scope": 4, "mla_decode fallback no_kernel": 1}}}))


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
