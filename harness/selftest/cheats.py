"""Section 3: one fixture kernel per known cheat (tests/fixtures/cheats/<name>.py, all
silu_and_mul variants of honest.py), each landed as a real candidate and put through the
gates. The ones the static gate refuses are refused here, on any machine, with the rule
named; the ones only a GPU run can reveal must PASS the static gate (else the fixture
would never reach the GPU gate it targets) and compile, and are NOT_RUN without a GPU."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

OP = "silu_and_mul"


@dataclass(frozen=True)
class Cheat:
    name: str
    what: str
    static_rules: tuple[str, ...]      # rules the static gate must name; () = GPU-only cheat
    gpu_gate: str                      # the gate that must reject it on a GPU


CHEATS: tuple[Cheat, ...] = (
    Cheat("cache_by_pointer", "output cached by buffer address", (), "numerics_unit"),
    Cheat("cache_by_content", "output cached by input checksum", ("torch_compute",), "static"),
    Cheat("skip_after_first_call", "work done on the first call only", (), "numerics_unit"),
    Cheat("side_stream", "work on a side stream", ("torch_compute",), "static"),
    Cheat("side_thread", "work on a side thread", ("forbidden_import",), "static"),
    Cheat("timer_patched_time", "host timer patched", ("forbidden_import",), "static"),
    Cheat("timer_patched_cuda_event", "CUDA event timer patched", ("torch_compute",), "static"),
    Cheat("inputs_mutated", "inputs mutated", (), "numerics_unit"),
    Cheat("partial_writes", "half of the output written", (), "numerics_unit"),
    Cheat("torch_fallback", "torch fallback in try/except", ("try_except", "torch_compute"), "static"),
    Cheat("precision_lowered", "sigmoid rounded to 3 bits", (), "numerics_unit"),
    Cheat("tuned_to_one_shape", "TP8 width hard-coded", (), "numerics_unit"),
    Cheat("tuned_to_one_seed", "approximation tuned to small inputs", (), "numerics_unit"),
    Cheat("reads_reference", "copies the reference's answer", ("forbidden_import",), "static"),
)


def fixtures_dir() -> Path:
    from .. import paths

    return paths.REPO_ROOT / "tests" / "fixtures" / "cheats"


def land(cheat: str, root: Path):
    """The fixture as a candidate folder under root/kernels_generated/silu_and_mul/."""
    from ..toolchain import Provenance, Scope, create_candidate

    src = (fixtures_dir() / f"{cheat}.py").read_text()
    return create_candidate(OP, src, Scope(archs=("sm_90a",)), Provenance("human"), root=root / "kernels_generated")


def run_cheats(root: Path, compile_gpu_only: bool, gpu: bool) -> list[dict[str, Any]]:
    """One row per cheat: {name, what, rejected, rejected_by, reasons, static_rules, status}."""
    import gates
    from gates import GateContext, GateName, Verdict as GV

    from ..toolchain import compile_candidate
    from ..toolchain.verdict import Verdict

    config = gates.load_config()
    rows = []
    for ch in CHEATS:
        cand = land(ch.name, root)
        ctx = GateContext(OP, cand.id, root, config)
        res = gates.timed(GateName.STATIC, gates.runner(GateName.STATIC), ctx)
        rules = sorted(res.numbers.get("rules", []))
        row: dict[str, Any] = {"name": ch.name, "what": ch.what, "candidate": cand.id, "expected_gate": ch.gpu_gate,
                               "static_verdict": res.verdict.value, "static_rules": rules}
        if ch.static_rules:
            named = all(r in rules for r in ch.static_rules)
            row.update(rejected=res.verdict is GV.FAIL and named, rejected_by=f"static [{', '.join(rules)}]",
                       status="PASS" if res.verdict is GV.FAIL and named else "FAIL",
                       reasons=res.reasons[:3])
            rows.append(row)
            continue
        # GPU-only cheat: it must get past the static gate (and compile) to reach its gate.
        ok = res.verdict is GV.PASS
        why = [] if ok else [f"the fixture is refused by the static gate ({rules}): it never reaches {ch.gpu_gate}"]
        if ok and compile_gpu_only:
            for tp in cand.scope.tp:
                c = compile_candidate(cand, "sm_90a", tp)
                if c.verdict is not Verdict.OK:
                    ok = False
                    why.append(f"compile TP{tp}: {c.verdict.value}: {c.message}")
        row.update(reaches_gpu_gate=ok, reasons=why)
        if not gpu:
            row.update(rejected=None, rejected_by=f"{ch.gpu_gate} (GPU: not run)", status="NOT_RUN" if ok else "FAIL")
        else:
            gres = gates.timed(GateName(ch.gpu_gate), gates.runner(GateName(ch.gpu_gate)),
                               GateContext(OP, cand.id, root, config, device="cuda"))
            rejected = gres.verdict is GV.FAIL
            row.update(rejected=rejected, rejected_by=f"{ch.gpu_gate}: {gres.verdict.value}",
                       reasons=gres.reasons[:3], status="PASS" if rejected and ok else "FAIL")
        rows.append(row)
    return rows
