"""Torch ops dispatched by one decode step, by the catalogue op that issued them (CPU, no GPU).

The model gate (numerics_model) decodes ~4,500 steps with the reference path of every op that
has no promoted kernel, and on the H200 those steps are bound by the host: each dispatched op
costs ~10-15 us of Python and launch while the GPU idles. So the op count per step is what
its duration scales with, and this script counts it where no GPU is needed. The MoE
reference runs its CUDA form (`reference_per_slot`: the decode step a GPU runs) unless
`--moe-form cpu`.

    python scripts/count_step_ops.py                    # k3-tp8-rank, 3 layers, batch 4: the gate's stack
    python scripts/count_step_ops.py --batch 8 --json
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.errors import UserError


class _Count(TorchDispatchMode):
    def __init__(self, site: list[str], counts: collections.Counter) -> None:
        super().__init__()
        self.site, self.counts = site, counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[self.site[0]] += 1
        return func(*args, **(kwargs or {}))


def count(preset: str, layers: int, batch: int, moe_form: str, seed: int = 1) -> dict:
    from harness.model.cache import DecodeCache
    from harness.model.config import get_config
    from harness.model.decoder import K3Decoder
    from harness.model.weights import init_weights
    from harness.registry import Registry
    from reference_impls import moe_experts

    cfg = get_config(preset, layers)
    with torch.no_grad():
        w = init_weights(cfg, seed, "cpu")
    reg = Registry(check_shapes=cfg.is_k3_rank)
    site: list[str] = ["(decoder)"]
    counts: collections.Counter[str] = collections.Counter()
    run = reg.run

    def run_counted(op, inputs, **kw):
        outer, site[0] = site[0], op
        try:
            return run(op, inputs, **kw)
        finally:
            site[0] = outer
    reg.run = run_counted  # type: ignore[method-assign]  # count each call under its calling op
    dec = K3Decoder(cfg, w, reg)
    cache = DecodeCache.allocate(cfg, batch, 64)
    tokens = torch.arange(batch, dtype=torch.int64) + 5
    cpu_form = moe_experts.DEFINITION.reference
    if moe_form == "cuda":                       # the GPU's form on CPU tensors (same math)
        object.__setattr__(moe_experts.DEFINITION, "reference",
                           lambda **kw: moe_experts.reference_per_slot(**kw))
    try:
        dec.step(tokens, cache)                  # warm-up: lazy tables, first-call paths
        t0 = time.perf_counter()
        with _Count(site, counts):
            dec.step(tokens, cache)
    finally:
        object.__setattr__(moe_experts.DEFINITION, "reference", cpu_form)
    return {"preset": preset, "layers": layers, "batch": batch, "moe_form": moe_form,
            "moe_layers": sum(not cfg.is_dense(i) for i in range(cfg.n_layers)), "ops_per_step": sum(counts.values()), "by_op": dict(counts.most_common()),
            "cpu_step_s": round(time.perf_counter() - t0, 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="k3-tp8-rank")
    ap.add_argument("--layers", type=int, default=3, help="decoder layers (the model gate builds 3)")
    ap.add_argument("--batch", type=int, default=4, help="rows decoded together (the model gate decodes 4)")
    ap.add_argument("--moe-form", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.layers < 1:
        ap.error("--batch and --layers must be >= 1")
    try:
        r = count(a.preset, a.layers, a.batch, a.moe_form)
    except UserError as exc:
        print(f"count_step_ops: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"{r['preset']} x{r['layers']} layers, batch {r['batch']}, MoE {r['moe_form']} form: "
              f"{r['ops_per_step']} ops per step (CPU step {r['cpu_step_s']} s, under the counter)")
        for op, n in r["by_op"].items():
            print(f"  {op:16s} {n:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
