"""`harness selftest`: inject faults into the harness and count what happens (issue 9).

Sections (each a module): faults (crashing and hanging candidates through the toolchain
worker), durability (optimize killed and resumed; atomic writers killed), cheats (one
fixture kernel per cheat through the gates), secrets (a canary key must appear nowhere),
cli (bad input to every verb), llm (a hostile LLM server). `run_selftest` returns a
SelftestReport of Figures; sizes come from Sizes.quick() (CI) or Sizes.full() (--report).
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .report import Figure, SelftestReport, Section, Status

SECTIONS = ("faults", "durability", "cheats", "secrets", "cli", "llm")


@dataclass(frozen=True)
class Sizes:
    crashes: int            # 0 = every generated crash fixture
    hangs: int
    workers: int
    kills: int
    atomic_kills: int
    compile_cheats: bool
    all_cli_cases: bool

    @classmethod
    def quick(cls) -> "Sizes":
        return cls(crashes=6, hangs=3, workers=2, kills=5, atomic_kills=5, compile_cheats=False, all_cli_cases=False)

    @classmethod
    def full(cls) -> "Sizes":
        return cls(crashes=0, hangs=0, workers=2, kills=50, atomic_kills=50, compile_cheats=True, all_cli_cases=True)


def _spread(items: list, n: int) -> list:
    """n items spread over the list (every kind of fault gets a chance in quick mode)."""
    if n <= 0 or n >= len(items):
        return items
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def section_faults(sz: Sizes, gpu: bool, note: Callable[[str], None], gpu_results: dict | None = None) -> Section:
    from . import faults as F

    s = Section("faults", "1. crashes and hangs")
    token = F.new_token()
    crashes, hangs = F.cpu_faults(token)
    crashes, hangs = _spread(crashes, sz.crashes), _spread(hangs, sz.hangs)
    start_s = F.startup_s()
    deadline = max(8.0, 2.0 * start_s + 4.0)     # past the worker's own start (torch import)
    root = Path(tempfile.mkdtemp(prefix="selftest-cascade-"))
    cascade = F.make_cascade_check(root / "kernels_generated")
    c_out = F.run_faults(crashes, 120.0, sz.workers, token, cascade, lambda o: note(f"crash {o.name}: {o.verdict}"))
    h_out = F.run_faults(hangs, deadline, sz.workers, token, cascade, lambda o: note(f"hang {o.name}: {o.verdict}"))
    everything = c_out + h_out
    s.add("crashing candidates run", len(c_out), 50 if not sz.crashes else sz.crashes, ">=")
    s.add("crashes classified correctly", sum(o.ok for o in c_out), len(c_out))
    s.add("hanging candidates run", len(h_out), 20 if not sz.hangs else sz.hangs, ">=")
    s.add("hangs classified TIMEOUT", sum(o.ok for o in h_out), len(h_out))
    s.add("fixtures that reached their fault", sum(1 for o in everything if o.reached is not False),
          len(everything), note="marker line on stderr (a syntax error counts as reached)")
    s.add("cascaded failures (honest candidate after each)", sum(1 for o in everything if o.cascade_ok is False), 0)
    s.add("orphan processes", sum(o.orphans for o in everything), 0, note="killed groups + marked grandchildren, /proc scan")
    kl = [o.kill_latency_s for o in h_out if o.kill_latency_s is not None]
    rl = [o.return_latency_s for o in h_out if o.return_latency_s is not None]
    s.add("hang deadline", round(deadline, 1), unit="s", note=f"worker start {start_s:.1f} s")
    s.add("kill latency past deadline p50", _r(F.percentile(kl, 50)), unit="s")
    s.add("kill latency past deadline p99", _r(F.percentile(kl, 99)), 5.0, "<=", unit="s")
    s.add("return latency past deadline p99", _r(F.percentile(rl, 99)), unit="s", note="incl. pipe drain")
    if gpu_results is not None:
        from .gpu import add_fault_figures

        add_fault_figures(s, gpu_results.get("faults", []))
    elif not gpu:
        s.add("GPU faults (launch, illegal address, device loop)", "NOT RUN", not_run=True,
              note="scripts/gpu/selftest_gpu.py")
    s.details = [o.__dict__ for o in everything] + list((gpu_results or {}).get("faults", []))
    return s


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def section_durability(sz: Sizes) -> Section:
    from .durability import run_durability

    s = Section("durability", "2. durability (SIGKILL + resume)")
    d = run_durability(sz.kills, sz.atomic_kills, Path(tempfile.mkdtemp(prefix="selftest-durability-")))
    s.add("optimize SIGKILLs", d["kills"], sz.kills, ">=")
    s.add("records lost", d["lost"], 0)
    s.add("records duplicated", d["duplicated"], 0)
    s.add("unparsable lines/files", d["unparsable"], 0)
    s.add("event seq gaps or repeats (runs)", d["seq_errors"], 0)
    s.add("runs not finished after resume", d["unfinished"], 0)
    s.add("stray temp files left", d["tmp_left"], note="harmless: never read")
    s.add("uninterrupted run (warm cache)", round(d["reference_run_s"], 2), unit="s")
    s.add("summary rewriter SIGKILLs", d["atomic_kills"], sz.atomic_kills, ">=")
    s.add("torn summaries", d["torn_summaries"], 0)
    s.add("event appender SIGKILLs", d["append_kills"], sz.atomic_kills, ">=")
    s.add("torn event logs after reopen", d["torn_logs"] + d["append_seq_errors"], 0)
    s.details = [d]
    return s


def section_cheats(sz: Sizes, gpu: bool, gpu_results: dict | None = None) -> Section:
    from .cheats import CHEATS, run_cheats

    s = Section("cheats", "3. cheats")
    rows = run_cheats(Path(tempfile.mkdtemp(prefix="selftest-cheats-")), sz.compile_cheats, gpu)
    cpu = [r for r in rows if r["expected_gate"] == "static"]
    gpu_rows = [r for r in rows if r["expected_gate"] != "static"]
    s.add("cheat fixtures", len(rows), len(CHEATS))
    s.add("rejected by the static gate (rule named)", sum(r["status"] == "PASS" for r in cpu), len(cpu))
    s.add("GPU-only fixtures that reach their gate", sum(bool(r.get("reaches_gpu_gate")) for r in gpu_rows),
          len(gpu_rows), note="pass static" + (" and compile" if sz.compile_cheats else ""))
    if gpu_results is not None:
        from .gpu import add_cheat_figures

        add_cheat_figures(s, gpu_results.get("cheats", []))
        rows = rows + [{**r, "from": "selftest_gpu.py"} for r in gpu_results.get("cheats", [])]
    elif gpu:
        s.add("rejected by their GPU gate", sum(r["status"] == "PASS" for r in gpu_rows), len(gpu_rows))
    else:
        s.add("rejected by their GPU gate", "NOT RUN", not_run=True, note=f"{len(gpu_rows)} fixtures need a GPU")
    s.details = rows
    return s


def section_secrets() -> Section:
    from .llm_faults import run_loop_storm
    from .secrets_leak import canary_key, count_in_tree, run_dumpers_with_key_in_initial_env

    s = Section("secrets", "4. secrets (canary key)")
    key = canary_key()
    root = Path(tempfile.mkdtemp(prefix="selftest-secrets-"))
    cache = Path(tempfile.mkdtemp(prefix="selftest-secrets-cache-"))
    d = run_dumpers_with_key_in_initial_env(root, cache, key)
    storm = run_loop_storm(root, key)
    n_root, where_root = count_in_tree(root, key)
    n_cache, where_cache = count_in_tree(cache, key)
    s.add("env-dumping candidate ran", " ".join(d["verdicts"]), note="reads /proc/<ppid>/environ")
    s.add("key in compile reports (returned to callers)", d["report_leaks"], 0)
    s.add("key in harness output", d["helper_output_leaks"], 0)
    s.add("SDK HTTP debug log lines (OPENAI_LOG=debug)", storm.get("sdk_debug_lines", 0), 1, ">=",
          note="runs/sdk_http_debug.log, scanned below")
    s.add("key in runs/, kernels_generated/, evidence, dashboard", n_root, 0, note=", ".join(where_root[:3]))
    s.add("key in the compile cache", n_cache, 0, note=", ".join(where_cache[:3]))
    s.details = [{**d, "storm": storm, "where_root": where_root, "where_cache": where_cache}]
    return s


def section_cli(sz: Sizes) -> Section:
    from .cli_inputs import run_cli_inputs

    s = Section("cli", "5. bad input to every verb")
    rows = run_cli_inputs(Path(tempfile.mkdtemp(prefix="selftest-cli-")), all_cases=sz.all_cli_cases)
    verbs = sorted({r["case"].split(":")[0] for r in rows})
    s.add("verbs covered", len(verbs), note=", ".join(verbs))
    s.add("bad-input cases", len(rows))
    s.add("non-zero exit", sum(r["exit"] not in (0, None) for r in rows), len(rows))
    s.add("one clear line, no traceback", sum(r["one_line"] for r in rows), len(rows))
    s.add("files left half-written", len(rows[0]["files_left"]) if rows else 0, 0)
    s.details = rows
    return s


def section_llm() -> Section:
    from .llm_faults import SCENARIOS, run_loop_storm, run_provider_scenarios

    s = Section("llm", "6. LLM faults")
    rows = run_provider_scenarios()
    s.add("provider scenarios", len(rows), len(SCENARIOS))
    s.add("bounded retries (request count as policy)", sum(r["requests"] == r["expected_requests"] for r in rows), len(rows))
    s.add("deadlines kept", sum(r["wall_s"] <= r["bound_s"] for r in rows), len(rows),
          note=", ".join(r["name"] for r in rows if r["wall_s"] > r["bound_s"]))
    s.add("expected outcome", sum(r["ok"] for r in rows), len(rows))
    root = Path(tempfile.mkdtemp(prefix="selftest-llm-"))
    storm = run_loop_storm(root, "sk-selftest-llm-" + "0" * 24)
    s.add("loop under a 429 storm", storm.get("storm_outcome"), note=f"{storm.get('storm_requests')} requests, "
          f"{storm.get('storm_wall_s')} s")
    s.add("run folder intact after the storm", bool(storm.get("storm_events_parse") and storm.get("storm_summary_parses")), True)
    s.add("resumed run finished", bool(storm.get("resumed_finished")), True)
    s.details = rows + [storm]
    return s


def run_selftest(quick: bool = False, only: list[str] | None = None,
                 note: Callable[[str], None] | None = None, gpu_results: dict | None = None) -> SelftestReport:
    """gpu_results: scripts/gpu/selftest_gpu.py's JSON (gpu.load_gpu_results): its figures
    replace the GPU rows this machine would report NOT_RUN."""
    from ..toolchain.evaluate import gpu_available

    sz = Sizes.quick() if quick else Sizes.full()
    gpu = gpu_available()
    note = note or (lambda msg: None)
    rep = SelftestReport(quick=quick, gpu=gpu)
    t0 = time.perf_counter()
    runners = {"faults": lambda: section_faults(sz, gpu, note, gpu_results), "durability": lambda: section_durability(sz),
               "cheats": lambda: section_cheats(sz, gpu, gpu_results), "secrets": section_secrets,
               "cli": lambda: section_cli(sz), "llm": section_llm}
    for key in only or list(SECTIONS):
        note(f"section {key}")
        t1 = time.perf_counter()
        try:
            sec = runners[key]()
        except Exception as exc:  # noqa: BLE001 - a broken section is a FAIL with its reason, the rest still run
            sec = Section(key, key, error=f"{type(exc).__name__}: {exc}"[:400])
        sec.wall_s = round(time.perf_counter() - t1, 1)
        rep.sections.append(sec)
    rep.wall_s = round(time.perf_counter() - t0, 1)
    return rep


__all__ = ["Figure", "Section", "SelftestReport", "Sizes", "Status", "SECTIONS", "run_selftest"]
