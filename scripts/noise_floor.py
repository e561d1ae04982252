"""Experiment (CPU or GPU): how far does a *legitimate* reordering of the moe_router's fp32 sums move
the K3 decode path? Runs the numerics_model lockstep machinery (gates/_k3.py) with a
test-only router "kernel" on the on path and the gate's benign noise path beside it.

    python scripts/noise_floor.py --config k3-tp8-rank:3 --on splitk16 --steps 40 --prompt 8 \
        --out results/moe_router/noise_floor_cpu.json

--on reference : the reference itself as the kernel (control: every series must be exactly 0)
--on splitkN   : logits summed over N K-chunks (the noise path uses gates/_benign.SPLITS = 8)
Greedy decode, batch 4, weights seed as the gate. ~12 s per step per 3 paths at k3-tp8-rank:3
on a 2-core CPU (the reference MoE dominates), so keep --steps small there; --device cuda
runs it on a GPU (scripts/gpu/model_numerics.sh: the reference-as-kernel control there).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _reference_router(x, router_weight, e_score_bias, topk_weights, topk_ids, **_):
    import reference_impls

    r = reference_impls.get("moe_router").run_reference(
        {"x": x, "router_weight": router_weight, "e_score_bias": e_score_bias})
    topk_weights.copy_(r["topk_weights"])
    topk_ids.copy_(r["topk_ids"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="k3-tp8-rank:3")
    ap.add_argument("--on", default="splitk16")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.device == "cpu":
        torch.set_num_threads(2)

    from gates import _benign, _k3
    from harness import paths
    from harness.model.sampling import SamplingParams

    on_fn = _reference_router if a.on == "reference" else _benign.router_split_k(int(a.on.removeprefix("splitk")))
    t0 = time.perf_counter()
    pair = _k3.build_pair("moe_router", None, paths.root(), a.config, 3, a.device, noise=True, on_fn=on_fn)
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, a.batch, a.prompt), a.steps, SamplingParams())
    r.pop("trace", None)
    rec = {"experiment": "moe_router noise floor", "model_config": a.config, "on_path": a.on,
           "noise_path": pair.noise_kind, "batch": a.batch, "prompt_tokens": a.prompt, "steps": a.steps,
           "decode": "greedy, teacher forcing on the on path's tokens", "device": a.device, "torch": torch.__version__,
           "wall_s": round(time.perf_counter() - t0, 1), "run": r}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rec, indent=1) + "\n")
    keys = ("greedy_agreement", "max_kl", "mean_kl", "max_logit_rel_err", "first_divergence_step",
            "first_flip_step", "steps_with_flips")
    print(json.dumps({"on": {k: r[k] for k in keys}, "noise": {k: r["noise"][k] for k in keys}}))


if __name__ == "__main__":
    main()
