"""Replay numerics_unit samples of candidates at one point: the gate's own input maker,
adversarial kinds, tolerances and check (gates/numerics_unit.py), with given or fresh seeds.

    python3 scripts/gpu/replay_numerics.py OP ID[,ID...] --batch 1 --tp 8 [--state-dtype bf16]
        [--shape nb8] [--kind large] [--seeds 5028056091833958651,...] [--fresh 50]

Prints, per candidate and seed, the verdict and the worst relative norm error per output, then
per candidate how many samples failed: a gate failure is told apart from a marginal kernel (how
often fresh seeds fail) and from a path two candidates share (both fail the same seed)."""
from __future__ import annotations

import argparse
import json
import secrets

import torch

import reference_impls
from gates.config import config_path, load_config
from gates.numerics_unit import adversarial, check_one, effective_tolerances
from harness import paths
from harness.opdef import Point, RoutingProfile
from harness.registry import device_arch
from harness.toolchain import load_compiled
from harness.toolchain.candidate import load_candidate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("ids")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--state-dtype", default="")
    ap.add_argument("--shape", default="")
    ap.add_argument("--kind", default="random", help="random, ties, large or equal_rows")
    ap.add_argument("--seeds", default="", help="comma list of seeds to replay")
    ap.add_argument("--fresh", type=int, default=0, help="this many fresh seeds as well")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    defn = reference_impls.get(args.op)
    config = load_config(config_path(paths.root()))
    sdt = args.state_dtype or defn.state_dtypes[0]
    pt = Point(batch=args.batch, tp=args.tp, context=0, routing=RoutingProfile.UNIFORM, state_dtype=sdt,
               shape=args.shape)
    tolerances = effective_tolerances(defn, config, pt)
    static = {"shape": args.shape} if args.shape else {}
    if len(defn.state_dtypes) > 1:
        static["state_dtype"] = sdt
    seeds = [int(s) for s in args.seeds.split(",") if s] + [secrets.randbits(63) for _ in range(args.fresh)]
    arch = device_arch(torch.device("cuda"))
    rows = []
    for cid in args.ids.split(","):
        cand = load_candidate(args.op, cid)
        fn = load_compiled(cand.path, arch, args.tp, **static)
        fails = 0
        for seed in seeds:
            inputs = defn.make_inputs(pt, torch.Generator().manual_seed(seed), "cuda")
            if args.kind != "random":
                inputs = adversarial(defn, inputs, args.kind, config)
            res = check_one(defn, fn, pt, inputs, tolerances)
            fails += not res["ok"]
            rows.append({"candidate": cand.id, "seed": seed, "ok": res["ok"], "rel_norm_err": res.get("rel_norm_err")})
            errs = " ".join(f"{k}={v:.3g}" for k, v in (res.get("rel_norm_err") or {}).items())
            print(f"{cand.id} seed={seed} {'ok  ' if res['ok'] else 'FAIL'} {errs}", flush=True)
        print(f"{cand.id}: {fails} of {len(seeds)} samples failed ({args.kind}, B={args.batch} TP{args.tp} {sdt})")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
