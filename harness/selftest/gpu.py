"""The GPU parts of `harness selftest` (run on the H200 by scripts/gpu/selftest_gpu.py; the
CPU machine reports them NOT_RUN, or reads their JSON back with --gpu-results).

(a) GPU faults through the real toolchain worker (illegal address, device trap, device
infinite loop, RuntimeError in launch() before / after the kernel): each fixture is landed as a silu_and_mul
candidate and put through `evaluate_candidate` (static checks off: faults reach the worker
unchecked on purpose, as in faults.py) with its own sandbox deadline. After each fault the
canary (a fresh process) and the honest candidate (full pipeline, static checks on) must
still pass, and no eval worker of ours may be left alive.
(b) The GPU-only cheat fixtures of cheats.py through the real numerics_unit gate, each in
its own sandboxed process (gates._isolated.run_isolated, the gate suite's path); each must
FAIL with the expected check named in its reasons.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from ..toolchain.verdict import Verdict

OP = "silu_and_mul"
WORKER_MARK = "harness.toolchain._child"      # the eval worker's command line (sandbox.run_job)
GPU_SCHEMA = "harness-selftest-gpu/1"


@dataclass(frozen=True)
class GpuFault:
    name: str
    what: str
    expected: Verdict
    timeout_s: float                   # the eval worker's deadline (sandbox), past its start-up


def fixtures_dir() -> Path:
    from .. import paths

    return paths.REPO_ROOT / "tests" / "fixtures" / "gpu_faults"


def _honest() -> str:
    from .faults import honest_source

    return honest_source()


_HONEST_LAUNCH = "def launch(compiled, gate_up, out) -> None:\n    compiled(gate_up, out)\n"
LAUNCH_VARIANTS = {
    "launch_raises_before_kernel": "    raise RuntimeError('selftest: fault inside launch, before the kernel')\n"
                                   "    compiled(gate_up, out)\n",
    "launch_raises_after_kernel": "    compiled(gate_up, out)\n"
                                  "    raise RuntimeError('selftest: fault inside launch, kernel in flight')\n",
}

GPU_FAULTS: tuple[GpuFault, ...] = (
    GpuFault("illegal_address", "kernel stores ~2 GiB past its output", Verdict.CUDA_ERROR, 180.0),
    GpuFault("device_trap", "PTX trap in every writing thread (a failed device assert)", Verdict.CUDA_ERROR, 180.0),
    GpuFault("device_loop", "kernel spins on a global value that never changes", Verdict.TIMEOUT, 60.0),
    GpuFault("launch_raises_before_kernel", "RuntimeError in launch(), no kernel launched", Verdict.CRASH, 180.0),
    GpuFault("launch_raises_after_kernel", "RuntimeError in launch(), kernel in flight", Verdict.CRASH, 180.0),
)


def fault_source(name: str) -> str:
    """kernel.py of one GPU fault: a fixture file, or honest.py with its launch() replaced."""
    if name in LAUNCH_VARIANTS:
        src = _honest()
        if _HONEST_LAUNCH not in src:
            raise RuntimeError("honest.py's launch() changed: update LAUNCH_VARIANTS")
        return src.replace(_HONEST_LAUNCH, "def launch(compiled, gate_up, out) -> None:\n" + LAUNCH_VARIANTS[name])
    return (fixtures_dir() / f"{name}.py").read_text()


def land_fault(name: str, root: Path, source: str | None = None):
    from ..toolchain import Provenance, Scope, create_candidate

    return create_candidate(OP, source if source is not None else fault_source(name),
                            Scope(archs=("sm_90a",), tp=(8,)), Provenance("human"), root=root / "kernels_generated")


def workers_alive() -> list[int]:
    from .faults import marked_processes

    return marked_processes(WORKER_MARK)


def _eval(cand, timeout_s: float, cache_root: Path, check_static: bool):
    from ..opdef import Point
    from ..toolchain import evaluate_candidate

    return evaluate_candidate(cand, [Point(batch=4, tp=8)], archs=["sm_90a"], time_it=False, n_input_sets=2,
                              timeout_s=timeout_s, compile_timeout_s=300.0, cache_root=cache_root,
                              check_static=check_static)


def run_gpu_fault(f: GpuFault, root: Path, cache_root: Path, honest) -> dict[str, Any]:
    """One fault, then the canary and the honest candidate (fresh workers each)."""
    from ..toolchain import run_canary

    row: dict[str, Any] = {"name": f.name, "what": f.what, "expected": f.expected.value, "timeout_s": f.timeout_s}
    before = set(workers_alive())     # another harness run's workers on this machine are not this fault's
    t0 = time.monotonic()
    rep = _eval(land_fault(f.name, root), f.timeout_s, cache_root, check_static=False)
    row.update(verdict=rep.verdict.value, message=rep.message[:300], gpu_run=rep.gpu_run,
               wall_s=round(time.monotonic() - t0, 2), log_tail=rep.worker_log_tail[-800:])
    row["ok"] = rep.verdict is f.expected
    if f.expected is Verdict.TIMEOUT:
        row["past_deadline_s"] = round(rep.wall_s - f.timeout_s, 2)   # incl. the parent's compile before the worker
    time.sleep(0.2)
    left = [pid for pid in workers_alive() if pid not in before]
    row["workers_left"] = len(left)
    row["canary_ok"] = run_canary()
    h = _eval(honest, 300.0, cache_root, check_static=True)
    row.update(honest_verdict=h.verdict.value, honest_message=h.message[:200], cascade_ok=h.verdict is Verdict.OK)
    good = row["ok"] and row["canary_ok"] and row["cascade_ok"] and not left
    row["status"] = "PASS" if good else "FAIL"
    return row


# numerics_unit reason text -> the check that produced it (gates/numerics_unit.py `decide`)
CHECKS = (("inputs mutated", "input_mutation"), ("not bitwise identical", "determinism"), (": wrong:", "accuracy"), (": raised:", "raised"),
          ("deadline (hang)", "timeout"), ("(crash)", "crash"), ("distinct random input sets", "coverage"),
          ("adversarial sets not run", "coverage"))
EXPECTED_CHECKS: dict[str, tuple[str, ...]] = {
    "cache_by_pointer": ("accuracy",),                      # skipped launch leaves the NaN poison
    "skip_after_first_call": ("accuracy", "determinism"),
    "inputs_mutated": ("input_mutation",),
    "partial_writes": ("accuracy",),
    "precision_lowered": ("accuracy",),
    "tuned_to_one_shape": ("raised",),                    # TVM-FFI refuses the TP16 width it was not built for
    "tuned_to_one_seed": ("accuracy",),
}


def named_checks(reasons: list[str]) -> list[str]:
    return sorted({check for r in reasons for needle, check in CHECKS if needle in r})


def gpu_cheats() -> list:
    from .cheats import CHEATS

    return [c for c in CHEATS if c.gpu_gate == "numerics_unit"]


def cheat_root(root: Path) -> Path:
    """A repository root for the gates: the frozen gate config pinned at gates/gate_config.toml."""
    from .. import paths

    (root / "gates").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths.REPO_ROOT / "gates" / "gate_config.toml", root / "gates" / "gate_config.toml")
    return root


def run_gpu_cheat(cheat, root: Path, timeout_s: float) -> dict[str, Any]:
    import gates
    from gates import GateContext, GateName, Verdict as GV
    from gates._isolated import run_isolated

    from .cheats import land

    cand = land(cheat.name, root)
    config = gates.load_config(root / "gates" / "gate_config.toml")
    ctx = GateContext(OP, cand.id, root, config, device="cuda")
    static = gates.timed(GateName.STATIC, gates.runner(GateName.STATIC), GateContext(OP, cand.id, root, config))
    t0 = time.monotonic()
    res = run_isolated(GateName.NUMERICS_UNIT.value, ctx, timeout_s)
    checks = named_checks(res.reasons)
    want = EXPECTED_CHECKS.get(cheat.name, ())
    rejected = res.verdict is GV.FAIL
    named = any(c in checks for c in want)
    return {"name": cheat.name, "what": cheat.what, "candidate": cand.id, "expected_gate": cheat.gpu_gate,
            "static_verdict": static.verdict.value, "reaches_gpu_gate": static.verdict is GV.PASS,
            "verdict": res.verdict.value, "rejected": rejected, "checks": checks, "expected_checks": list(want),
            "rejected_by": f"numerics_unit [{', '.join(checks)}]", "reasons": res.reasons[:3],
            "wall_s": round(time.monotonic() - t0, 2),
            "status": "PASS" if rejected and named and static.verdict is GV.PASS else "FAIL"}


def error_row(name: str, exc: BaseException) -> dict[str, Any]:
    return {"name": name, "status": "FAIL", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


def not_run_row(name: str, why: str) -> dict[str, Any]:
    return {"name": name, "status": "NOT_RUN", "ok": None, "error": why}


# ---- figures: the rows the CPU report shows as NOT_RUN, from the GPU script's JSON ---------

def add_fault_figures(section, faults: list[dict[str, Any]]) -> None:
    ran = [r for r in faults if r.get("verdict")]
    section.add("GPU faults run (illegal address, trap, device loop, launch)", len(ran), len(GPU_FAULTS), ">=",
                note="scripts/gpu/selftest_gpu.py")
    section.add("GPU faults classified correctly", sum(bool(r.get("ok")) for r in ran), len(faults),
                note=", ".join(f"{r['name']}={r.get('verdict', r.get('error', '?'))}" for r in faults)[:300])
    section.add("GPU cascaded failures (canary + honest after each)",
                sum(1 for r in ran if not (r.get("canary_ok") and r.get("cascade_ok"))), 0)
    section.add("GPU eval workers left alive", sum(int(r.get("workers_left", 0)) for r in ran), 0)


def add_cheat_figures(section, cheats: list[dict[str, Any]]) -> None:
    n = len(gpu_cheats())
    section.add("rejected by their GPU gate", sum(r.get("status") == "PASS" for r in cheats), n,
                note="numerics_unit, expected check named: " + ", ".join(
                    f"{r['name']}={'/'.join(r.get('checks', [])) or r.get('verdict', r.get('error', '?'))}"
                    for r in cheats)[:300])


def load_gpu_results(path: Path) -> dict[str, Any]:
    """The JSON selftest_gpu.py wrote; UserError when it is not one."""
    import json

    from ..errors import UserError

    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read GPU results {path}: {exc}") from None
    if not isinstance(d, dict) or d.get("schema") != GPU_SCHEMA:
        raise UserError(f"{path} is not a selftest_gpu.py result (schema {GPU_SCHEMA})")
    return d


def summary_json(meta: dict[str, Any], faults: list[dict[str, Any]], cheats: list[dict[str, Any]]) -> dict[str, Any]:
    from .report import Section

    fs, cs = Section("faults", "1. GPU faults"), Section("cheats", "3. GPU cheats")
    add_fault_figures(fs, faults)
    add_cheat_figures(cs, cheats)
    figs = [{**asdict(f), "status": f.status.value, "section": s.key} for s in (fs, cs) for f in s.figures]
    return {"schema": GPU_SCHEMA, **meta, "faults": faults, "cheats": cheats, "figures": figs,
            "ok": all(f["status"] != "FAIL" for f in figs)}


Note = Callable[[str], None]
