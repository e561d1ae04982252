"""perf_sweep's per-layer A/B (gates._layer_ab.layer_ab) for promoted kernels, outside the gate:
what the gate's end-to-end check would read for each, with the gate's settings (model config,
batch, rounds, steps per sample from gates/gate_config.toml). No evidence is written.

    OUT=/tmp/out python scripts/gpu/layer_ab_probe.py                    # every promoted kernel
    OUT=/tmp/out python scripts/gpu/layer_ab_probe.py --ops moe_router --repeat 2

Prints one line per (op, repeat) and writes $OUT/layer_ab_probe.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gates import _k3, _layer_ab  # noqa: E402
from gates.config import config_path, load_config  # noqa: E402
from harness import paths  # noqa: E402
from harness.model.config import candidate_gate_model_config  # noqa: E402
from harness.promotion import read_manifest  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="", help="comma-separated ops (default: every promoted op)")
    ap.add_argument("--repeat", type=int, default=1, help="A/B runs per op (a fresh pair each)")
    ap.add_argument("--config", default=None,
                    help="model preset (default: the gate's for each candidate, harness.model.config.candidate_gate_model_config)")
    a = ap.parse_args(argv)
    root = paths.root()
    conf = load_config(config_path(root))
    cfg = lambda n: conf.get("perf_sweep", n)  # noqa: E731
    entries = {e["op"]: e["candidate"] for e in read_manifest(root)}
    ops = [o for o in a.ops.split(",") if o] or sorted(entries)
    layers, batch = int(cfg("layer_model_layers")), int(cfg("layer_batch"))
    rounds, steps = int(cfg("repeats")), int(cfg("layer_steps_per_sample"))
    out = []
    for op in ops:
        cand_dir = root / "kernels_generated" / op / entries[op]
        for rep in range(a.repeat):
            t0 = time.perf_counter()
            preset = a.config or candidate_gate_model_config(root, op, entries[op])
            pair = _k3.build_pair(op, cand_dir, root, f"{preset}:{layers}", layers, "cuda")
            r = _layer_ab.layer_ab(pair, batch, rounds, steps)
            r.update(op=op, candidate=entries[op], repeat=rep, wall_s=round(time.perf_counter() - t0, 1),
                     fused_kernels_off=list(pair.fused_off))
            del pair
            out.append(r)
            print(f"{op:<18} {entries[op]} rep {rep}: {r['mode']:<5} on {r['on_us']:8.1f} off {r['off_us']:8.1f} us "
                  f"on/off {r['on_us'] / r['off_us']:.4f} noise {r['noise_rel']:.4f} calls {r['kernel_calls_on']}/"
                  f"{r['kernel_calls_off']} {r['wall_s']} s {r['graph_error']}", flush=True)
            if os.environ.get("OUT"):
                Path(os.environ["OUT"], "layer_ab_probe.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
