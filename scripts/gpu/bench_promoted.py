"""Time every promoted kernel at every point of its scope, then the per-layer on/off tables, on the
card this runs on: the runs `harness scorecard --gpu <card>` judges. The commands come from
kernels_generated/promoted.json, so a new promotion is timed without editing a call script
(sessions 38 and 52 wrote them by hand and had to list each kernel's id, shapes and batches).

    source scripts/gpu/setup.sh && export OUT && python3 scripts/gpu/bench_promoted.py [--only G,...]
    python3 scripts/gpu/bench_promoted.py --plan [--json]        # the commands, nothing run (no GPU needed)
    ... --with OP/ID[,OP/ID]   # also time these candidates (e.g. gated in the same device session, or
                               # just demoted), each at its own declared scope (its candidate.json)

Steps (`--only` picks some; a device call runs at most 600 s, so split them, e.g. `--only
skinny,gemm,router` then `--only small,layers`; session 52's H100 took about 130 s for skinny and
gemm, 45 s for the router, 143 s for small and 115 s for each per-layer table):
  small   kda_decode, add_rmsnorm, attn_res, situ_and_mul
  router  moe_router
  gemm    gemm_situ_and_mul
  skinny  skinny_gemm
  layers  bench_layers.py --kernels both for k3-tp8-rank and k3-tp16-rank (1K context, B 1, 8, 64)
Each bench_kernels.py step times the ops of its group with session 38's flags (`FLAGS`) at the
union of their promoted kernels' TPs, sweep batches, named shapes and state dtypes, and only those
candidates. Each step runs under its own timeout (`LIMIT_S`; a hung kernel ends its step, not the
call) and writes $OUT/bench_promoted_<step>.{json,log} (bench_layers_<config>.{json,log} for the
layers). At the end $OUT is packed when it would not all come back (pack_out.sh). Plain Python.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64)
FLAGS = ("--rounds", "5", "--max-copies", "4096", "--eager-copies", "64", "--step-deadline-s", "120")
GROUPS = {"small": ("kda_decode", "add_rmsnorm", "attn_res", "situ_and_mul"), "router": ("moe_router",),
          "gemm": ("gemm_situ_and_mul",), "skinny": ("skinny_gemm",)}
LAYER_CONFIGS = ("k3-tp8-rank", "k3-tp16-rank")
# per step (layers: per config). Layers: one config took 193 s on an H100 in session 57 (k3-tp16-rank,
# kernels off and on at B 1, 8, 64), and session 56's `timeout 220` cut k3-tp8-rank at B=64.
LIMIT_S = {"small": 300, "router": 120, "gemm": 150, "skinny": 420, "layers": 280}
STEPS = (*GROUPS, "layers")


@dataclass
class Step:
    name: str                 # bench_promoted_<name> / bench_layers_<config>
    argv: list[str]
    limit_s: int
    writes: str               # the JSON file the command writes under $OUT
    keep_as: str              # what this script renames it to


def bench_step(name: str, entries: list[dict]) -> Step | None:
    """The bench_kernels.py command timing the promoted kernels of group `name`, or None when none
    of its ops has one. The point grid is the union of the kernels' scopes (bench_kernels.py times
    each candidate only inside its own scope)."""
    ops = [op for op in GROUPS[name] if any(e["op"] == op for e in entries)]
    if not ops:
        return None
    mine = [e for e in entries if e["op"] in ops]
    tps = sorted({int(t) for e in mine for t in (e["scope"].get("tp") or (8, 16))})
    batches = [b for b in SWEEP_BATCHES if any(e["scope"]["batch"][0] <= b <= e["scope"]["batch"][1] for e in mine)]
    argv = [sys.executable, "scripts/gpu/bench_kernels.py", *FLAGS, "--ops", ",".join(ops),
            "--tps", ",".join(map(str, tps)), "--batches", ",".join(map(str, batches))]
    if any(e["scope"].get("shapes") == [] and _shape_names(e["op"]) for e in mine):
        argv += ["--shapes", "all"]                    # a kernel for every shape of its op
    elif shapes := sorted({s for e in mine for s in e["scope"].get("shapes", [])}):
        argv += ["--shapes", ",".join(shapes)]
    dtypes = sorted({s for e in mine for s in e["scope"].get("state_dtypes", [])})
    argv += ["--state-dtypes", ",".join(dtypes or ("fp32", "bf16"))]
    argv += ["--candidates", ",".join(sorted({e["candidate"] for e in mine}))]
    return Step(name, argv, LIMIT_S[name], f"bench_kernels_{'-'.join(ops)}.json", f"bench_promoted_{name}.json")


def _shape_names(op: str) -> list[str]:
    import reference_impls
    from harness.scorecard import shape_names

    return shape_names(reference_impls.get(op))


def plan(entries: list[dict], only: tuple[str, ...] = STEPS) -> list[Step]:
    steps = [s for name in GROUPS if name in only if (s := bench_step(name, entries)) is not None]
    if "layers" in only:
        steps += [Step(f"layers {c}", [sys.executable, "scripts/gpu/bench_layers.py", "--config", c, "--kernels", "both",
                                       "--layers", "4", "--iters", "10"], LIMIT_S["layers"],
                       f"bench_layers_{c}.json", f"bench_layers_{c}.json") for c in LAYER_CONFIGS]
    return steps


def with_entries(spec: str) -> list[dict]:
    """`--with OP/ID,...`: manifest-shaped entries for candidates that are not (or not yet) promoted,
    each with the scope its candidate.json declares, so one run times a replacement beside the
    kernels it would replace. SystemExit with a one-line message on a bad entry."""
    if not spec:
        return []                      # no --with: --plan needs no torch (harness imports it)
    from harness.errors import UserError
    from harness.toolchain.candidate import load_candidate

    entries = []
    for item in (i for i in spec.split(",") if i):
        op, _, cid = item.partition("/")
        try:
            cand = load_candidate(op, cid)
        except UserError as exc:
            raise SystemExit(f"bench_promoted: --with {item}: no candidate (give OP/ID): {exc}") from None
        entries.append({"op": op, "candidate": cand.id, "scope": cand.scope.to_json()})
    return entries


def run(steps: list[Step], out: Path) -> int:
    """Each step under its own timeout, its output in $OUT; the number of steps that failed."""
    failed = 0
    for s in steps:
        log = out / (Path(s.keep_as).stem + ".log")
        t0 = time.monotonic()
        try:
            with log.open("w") as fh:
                rc = subprocess.run(s.argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, timeout=s.limit_s).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if (out / s.writes).exists() and s.writes != s.keep_as:
            (out / s.writes).replace(out / s.keep_as)   # written after every point: a cut-off step keeps its points
        failed += rc != 0
        print(f"== {s.name}: rc={rc} in {time.monotonic() - t0:.0f} s (limit {s.limit_s} s) -> {s.keep_as}", flush=True)
    subprocess.run(["bash", "scripts/gpu/pack_out.sh", str(out)], cwd=ROOT)
    return failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(STEPS), help=f"comma list of steps: {', '.join(STEPS)} (default all)")
    ap.add_argument("--plan", action="store_true", help="print the commands and run nothing")
    ap.add_argument("--json", action="store_true", help="with --plan: the steps as JSON")
    ap.add_argument("--with", dest="extra", default="", metavar="OP/ID,...",
                    help="also time these candidates, each at its declared scope (layers use the manifest only)")
    a = ap.parse_args(argv)
    only = tuple(s for s in a.only.split(",") if s)
    if unknown := [s for s in only if s not in STEPS]:
        print(f"bench_promoted: unknown step(s) {', '.join(unknown)} (steps: {', '.join(STEPS)})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    entries = json.loads((ROOT / "kernels_generated" / "promoted.json").read_text())
    known = {(e["op"], e["candidate"]) for e in entries}
    entries += [e for e in with_entries(a.extra) if (e["op"], e["candidate"]) not in known]
    steps = plan(entries, only)
    if a.plan:
        if a.json:
            print(json.dumps([asdict(s) for s in steps], indent=1))
        else:
            for s in steps:
                print(f"# {s.name} (limit {s.limit_s} s) -> {s.keep_as}\n{' '.join(s.argv[1:])}")
            print(f"# {len(steps)} steps, limits adding up to {sum(s.limit_s for s in steps)} s")
        return 0
    out = Path(os.environ.get("OUT", ""))
    if not os.environ.get("OUT"):
        print("bench_promoted: set OUT to the folder that comes back from the device call", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    return 1 if run(steps, out) else 0


if __name__ == "__main__":
    sys.exit(main())
