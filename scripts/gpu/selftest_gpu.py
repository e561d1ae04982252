"""The GPU parts of `harness selftest` on the H200 (issue 9), one command, < 8 minutes:

    source scripts/gpu/setup.sh && python3 scripts/gpu/selftest_gpu.py [--only faults,cheats]
        [--cheat-workers 7] [--budget-s 420]

(a) GPU faults through the real eval worker (illegal address and device trap -> CUDA_ERROR,
device infinite loop -> TIMEOUT, RuntimeError inside launch() before / after the kernel -> CRASH),
each followed by the canary and the honest candidate (0 cascaded failures, 0 workers left);
(b) the 7 GPU-only cheat fixtures through the real numerics_unit gate (sandboxed), each
rejected with the failing check named. harness/selftest/gpu.py holds the cases.

Writes $OUT/selftest_gpu.json after every case (a killed run keeps what finished) and
$OUT/selftest_gpu.txt (the table). Feed the JSON back on the CPU machine with
`harness selftest --report --gpu-results selftest_gpu.json`. Exit 0 when every figure
passes, 1 otherwise. Needs no pydantic / gitpython / LLM SDKs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.selftest import gpu as G  # noqa: E402

CASE_SLACK_S = 120.0      # a case's own deadlines (sandbox, canary, honest eval) plus this


def run_case(name: str, fn, limit_s: float) -> dict:
    """fn() in a daemon thread; a case that neither returns nor raises within limit_s is
    recorded as a FAIL and left behind (its sandboxed processes carry their own deadlines)."""
    box: dict = {}

    def target() -> None:
        try:
            box["row"] = fn()
        except BaseException as exc:  # noqa: BLE001 - one broken case must not end the run
            box["row"] = {**G.error_row(name, exc), "traceback": traceback.format_exc()[-1500:]}

    t = threading.Thread(target=target, daemon=True, name=f"case-{name}")
    t.start()
    t.join(limit_s)
    return box.get("row") or G.error_row(name, TimeoutError(f"case still running after {limit_s:.0f} s"))


class Results:
    def __init__(self, out: Path, meta: dict) -> None:
        self.out, self.meta = out, meta
        self.faults: list[dict] = []
        self.cheats: list[dict] = []
        self.lock = threading.Lock()

    def add(self, kind: str, row: dict) -> None:
        with self.lock:
            getattr(self, kind).append(row)
            self.write()
        print(f"[{kind}] {row['name']}: {row.get('status') or row.get('verdict') or row.get('error')}", flush=True)

    def write(self) -> dict:
        d = G.summary_json({**self.meta, "wall_s": round(time.monotonic() - self.meta["_t0"], 1)},
                           self.faults, self.cheats)
        d.pop("_t0", None)
        tmp = self.out / "selftest_gpu.json.tmp"
        tmp.write_text(json.dumps(d, indent=1, default=str))
        os.replace(tmp, self.out / "selftest_gpu.json")
        return d


def table(d: dict) -> str:
    lines = [f"harness selftest GPU ({d.get('gpu', '?')}; {d.get('wall_s')} s)",
             f"{'section':8} {'figure':55} {'value':>6} {'target':>8} {'status':8} note"]
    for f in d["figures"]:
        tgt = "" if f["target"] is None else f"{f['op']} {f['target']}"
        lines.append(f"{f['section']:8} {f['name'][:55]:55} {str(f['value']):>6} {tgt:>8} {f['status']:8} {f['note']}")
    lines.append("")
    for r in d["faults"]:
        lines.append(f"fault {r['name']:30} {r.get('verdict', '-'):11} expected {r.get('expected', '-'):10} "
                     f"canary={r.get('canary_ok')} honest={r.get('honest_verdict')} left={r.get('workers_left')} "
                     f"{r.get('status')} {r.get('error', '')}")
    for r in d["cheats"]:
        lines.append(f"cheat {r['name']:30} {r.get('verdict', '-'):8} checks={','.join(r.get('checks', []))} "
                     f"want={','.join(r.get('expected_checks', []))} {r.get('status')} {r.get('error', '')}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="faults,cheats")
    ap.add_argument("--cheat-workers", type=int, default=7, help="numerics_unit gates at once (separate processes)")
    ap.add_argument("--cheat-timeout-s", type=float, default=300.0, help="numerics_unit sandbox deadline")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no new case after this")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="selftest-gpu-"))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    import torch

    meta = {"_t0": t0, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
            "cuda": torch.cuda.is_available(), "torch": torch.__version__}
    res = Results(out, meta)
    res.write()
    work = Path(tempfile.mkdtemp(prefix="selftest-gpu-work-"))
    cache = work / "compile-cache"
    only = {s.strip() for s in args.only.split(",")}
    if not torch.cuda.is_available():
        print("no CUDA GPU here: every case is NOT_RUN", flush=True)

    def over_budget() -> bool:
        return time.monotonic() - t0 > args.budget_s

    if "faults" in only:
        froot = work / "faults"
        honest = G.land_fault("honest", froot, G._honest())
        for f in G.GPU_FAULTS:
            if not torch.cuda.is_available() or over_budget():
                res.add("faults", G.not_run_row(f.name, "no GPU" if not torch.cuda.is_available() else "over budget"))
                continue
            res.add("faults", run_case(f.name, lambda f=f: G.run_gpu_fault(f, froot, cache, honest),
                                       f.timeout_s + 300.0 + CASE_SLACK_S))
    if "cheats" in only:
        croot = G.cheat_root(work / "cheats")

        def one(ch) -> None:
            if not torch.cuda.is_available() or over_budget():
                res.add("cheats", G.not_run_row(ch.name, "no GPU" if not torch.cuda.is_available() else "over budget"))
                return
            res.add("cheats", run_case(ch.name, lambda: G.run_gpu_cheat(ch, croot, args.cheat_timeout_s),
                                       args.cheat_timeout_s + CASE_SLACK_S))

        with ThreadPoolExecutor(max_workers=max(1, args.cheat_workers)) as pool:
            list(pool.map(one, G.gpu_cheats()))
    d = res.write()
    text = table(d)
    (out / "selftest_gpu.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if d["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
