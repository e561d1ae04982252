"""The four model-level runs of numerics_model (kernel on vs off through the decode path).

long_generation  greedy, >= long_generation_tokens lockstep steps after a short prompt
long_context     decode after a >= long_context_tokens context (synthesized MLA cache
                 rows + a real prompt, see _k3.fill_context)
sampling         temperature 0.8, top-k 50, top-p 0.95, one seed for both paths
structured       JSON-schema-constrained decoding (llguidance), greedy; the kernel-on
                 output must be a complete, schema-valid document in every row
Every run decodes three paths in lockstep: kernel on, kernel off, and the benign
perturbation (gates/_benign.py) whose drift from the off path is the noise floor.
Each run returns what numerics_model.decide() reads (with per-step series and the noise
path's statistics under "noise"), plus the registry trace of the op on both paths.
The tiny config (CPU smoke) runs the same code with small counts.
"""
from __future__ import annotations

import json
from importlib import resources
from typing import Any

from . import GateContext

# The tiny CPU smoke (~0.2 s per tiny decode step on a CI core): the code path, not the numbers.
SMOKE = {"long_generation": 4, "long_context": 40, "decode": 2, "sampling": 4, "structured": 16,
         "batch": 2, "prompt": 4}


def _schemas() -> dict[str, Any]:
    return json.loads(resources.files("harness.model").joinpath("data/schemas.json").read_text(encoding="utf-8"))


def model_runs(ctx: GateContext, device: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from harness.model.grammar import JsonConstraint
    from harness.model.sampling import SamplingParams

    from . import _k3

    c = lambda n: ctx.config.get("numerics_model", n)  # noqa: E731
    pair = _k3.build_pair(ctx.op, ctx.candidate_dir, ctx.root, ctx.model_config, int(c("model_layers")), device,
                          noise=True)
    smoke = pair.cfg.name == "tiny"
    n = SMOKE if smoke else {
        "long_generation": int(c("long_generation_tokens")), "long_context": int(c("long_context_tokens")),
        "decode": int(c("long_context_decode_steps")), "sampling": int(c("sampling_steps")),
        "structured": int(c("structured_max_tokens")), "batch": int(c("batch_rows")), "prompt": int(c("prompt_tokens"))}
    bsz, plen = n["batch"], n["prompt"]
    tok = pair.tokenizer
    greedy = SamplingParams()
    runs: list[dict[str, Any]] = []

    r = _k3.lockstep(pair, _k3.prompts(tok, bsz, plen, 0), n["long_generation"], greedy)
    runs.append({"kind": "long_generation", **r})
    r = _k3.lockstep(pair, _k3.prompts(tok, bsz, plen, 3), n["decode"], greedy,
                     context_fill=n["long_context"] - plen)
    runs.append({"kind": "long_context", **r})
    sp = SamplingParams(temperature=0.8, top_k=50, top_p=0.95, seed=1234)
    r = _k3.lockstep(pair, _k3.prompts(tok, bsz, plen, 6), n["sampling"], sp)
    runs.append({"kind": "sampling", "sampling_params": sp.__dict__, **r})
    schemas = _schemas()
    name = sorted(schemas)[0]
    try:
        cons = JsonConstraint(schemas[name], tok)
    except Exception as exc:  # noqa: BLE001 - no grammar engine / a rejected schema: the run fails, recorded
        runs.append({"kind": "structured", "valid": False, "error": f"{type(exc).__name__}: {exc}"})
    else:
        r = _k3.lockstep(pair, _k3.prompts(tok, bsz, plen, 9), n["structured"], greedy, constraint=cons,
                         schema=schemas[name])
        runs.append({"kind": "structured", "schema": name, **r})
    extra = {"n_layers": pair.cfg.n_layers, "model_preset": pair.cfg.name, "weights_seed": _k3.DEFAULT_SEED,
             "batch_rows": bsz, "prompt_tokens": plen, "teacher_forcing": "kernel-on path's tokens",
             "noise_path": pair.noise_kind, "fused_kernels_off": list(pair.fused_off),
             "cuda_graph": "not captured: other ops' reference paths synchronise with the host"}
    return runs, extra
