"""Model-level evaluation for the numerics gate: the same prompts and seed with the
registry's kernels on and off.

Both paths decode in lockstep, teacher-forced on the kernels-off path's greedy tokens, so
every step compares logits for the same context: per-step max |logit error|, KL(p_off ||
p_on), greedy-token agreement. Structured output (JSON schemas, llguidance) runs on each
path with seeded sampling and reports the schema-valid rate. Trace counters per path prove
which implementation ran (a gate requires kernel counts > 0 when a kernel is promoted).
"""
from __future__ import annotations

import enum
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

import torch

from harness import registry as registry_mod
from harness.errors import UserError

from .cache import DecodeCache
from .config import ModelConfig, get_config
from .decoder import K3Decoder
from .generate import generate
from .grammar import JsonConstraint, RowConstraints, validate
from .sampling import SamplingParams
from .tokenizer import ByteTokenizer
from .weights import init_weights

STRUCTURED_PARAMS = SamplingParams(temperature=0.8, top_k=50, top_p=0.95)


class KernelsMode(str, enum.Enum):
    ON = "on"
    OFF = "off"
    BOTH = "both"


@dataclass
class StepMetric:
    step: int
    max_logit_err: float
    kl: float                      # mean over rows of KL(p_off || p_on)
    agreement: float               # fraction of rows whose argmax agrees


@dataclass
class PathReport:
    kernels: str                   # "on" | "off"
    schema_valid: int
    schema_total: int
    trace: list[dict[str, Any]]    # registry counter rows of this path
    kernel_calls: int
    decode_s: float

    @property
    def schema_valid_rate(self) -> float:
        return self.schema_valid / self.schema_total if self.schema_total else 1.0


@dataclass
class EvalModelResult:
    config: str
    n_layers: int
    steps: int
    context: int
    batch: int
    seed: int
    kernels: KernelsMode
    device: str
    paths: list[PathReport]
    per_step: list[StepMetric] = field(default_factory=list)
    max_logit_err: float | None = None
    max_kl: float | None = None
    mean_kl: float | None = None
    greedy_agreement: float | None = None
    wall_s: float = 0.0

    def path(self, kernels: str) -> PathReport | None:
        return next((p for p in self.paths if p.kernels == kernels), None)


def load_prompts() -> list[dict[str, str]]:
    text = resources.files("harness.model").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_schemas() -> dict[str, dict[str, Any]]:
    return json.loads(resources.files("harness.model").joinpath("data/schemas.json").read_text(encoding="utf-8"))


def context_prompts(tok: ByteTokenizer, batch: int, context: int, seed: int) -> list[list[int]]:
    """Row b: BOS + shipped prompts concatenated from prompt (seed + b), cut to L_b tokens,
    L_b = context - b * context // (2 * batch): different lengths, longest first."""
    prompts = load_prompts()
    rows = []
    for b in range(batch):
        want = max(2, context - b * context // (2 * batch))
        ids = [tok.bos_token_id]
        j = seed + b
        while len(ids) < want:
            ids += tok.encode(prompts[j % len(prompts)]["text"] + "\n\n", bos=False)
            j += 1
        rows.append(ids[:want])
    return rows


def _delta(before: dict, after: dict) -> Counter:
    c = Counter(after)
    c.subtract(before)
    return +c


def evaluate_model(config: str | ModelConfig = "tiny", steps: int = 8, context: int = 16, batch: int = 2,
                   kernels: KernelsMode | str = KernelsMode.BOTH, seed: int = 0, structured: int = 2,
                   structured_tokens: int = 160, n_layers: int | None = None, device: str | None = None,
                   registry: registry_mod.Registry | None = None, fill: str = "prefill",
                   progress: Callable[[str, int, int], None] | None = None) -> EvalModelResult:
    """Decode `steps` tokens after `context`-token prompts with kernels on/off/both.

    fill="prefill" feeds the shipped prompts through the model (one step per token, the
    reference-speed prefill); fill="random" starts every path from the same seeded random
    caches holding `context` tokens (MLA latent rows, KDA states): decode after a 32K+
    context in seconds, for the long-context check on GPU configs."""
    t_start = time.perf_counter()
    mode = KernelsMode(kernels)
    cfg = config if isinstance(config, ModelConfig) else get_config(config, n_layers)
    if steps < 1 or context < 2 or batch < 1:
        raise UserError("need --steps >= 1, --context >= 2 and --batch >= 1")
    if structured < 0 or structured_tokens < 1:
        raise UserError(f"need --structured >= 0 and structured_tokens >= 1 (got {structured}, {structured_tokens})")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    reg = registry or registry_mod.default()
    model = K3Decoder(cfg, init_weights(cfg, seed, dev), reg)
    tok = ByteTokenizer(cfg.vocab, cfg.eos_id, cfg.bos_id)
    prompts = context_prompts(tok, batch, context, seed)
    max_len = context + steps + 1
    tick = progress or (lambda what, i, n: None)

    paths = [KernelsMode.OFF, KernelsMode.ON] if mode is KernelsMode.BOTH else [mode]
    caches = {p: DecodeCache.allocate(cfg, batch, max_len, dev) for p in paths}
    counts: dict[KernelsMode, Counter] = {p: Counter() for p in paths}
    secs: dict[KernelsMode, float] = {p: 0.0 for p in paths}

    def run(p: KernelsMode, fn):
        before = reg.counters()
        t0 = time.perf_counter()
        if p is KernelsMode.OFF:
            with reg.disabled("all"):
                out = fn()
        else:
            out = fn()
        secs[p] += time.perf_counter() - t0
        counts[p].update(_delta(before, reg.counters()))
        return out

    if fill == "random":
        _random_fill(caches[paths[0]], [len(q) for q in prompts], seed)
        for p in paths[1:]:
            caches[p].copy_from(caches[paths[0]])
        last = torch.tensor([q[-1] for q in prompts], device=dev)
        logits = {p: run(p, lambda p=p: model.step(last, caches[p])) for p in paths}
    elif fill == "prefill":
        logits = {p: run(p, lambda p=p: model.prefill(prompts, caches[p])) for p in paths}
    else:
        raise UserError(f"--fill must be prefill or random (got '{fill}')")
    tick("prefill", 1, 1)
    per_step: list[StepMetric] = []
    for s in range(steps):
        ref = paths[0]
        nxt = logits[ref].argmax(-1)                     # teacher forcing: the first path's greedy token
        if mode is KernelsMode.BOTH:
            per_step.append(_compare(s, logits[KernelsMode.OFF], logits[KernelsMode.ON]))
        if s == steps - 1:
            break
        for p in paths:
            logits[p] = run(p, lambda p=p: model.step(nxt, caches[p]))
        tick("decode", s + 1, steps)

    reports = []
    schemas = load_schemas()
    names = sorted(schemas)
    texts = load_prompts()
    sp = [tok.encode(texts[(seed + i) % len(texts)]["text"])[:max(2, context)] for i in range(structured)]
    row_schema = [names[i % len(names)] for i in range(structured)]
    for p in paths:
        valid = 0
        if structured:
            cons = RowConstraints([JsonConstraint(schemas[n], tok) for n in row_schema])
            params = SamplingParams(**{**STRUCTURED_PARAMS.__dict__, "seed": seed})
            res = run(p, lambda: generate(model, sp, structured_tokens, params, cons))
            valid = sum(f and validate(schemas[n], tok.decode(t)) for n, t, f in zip(row_schema, res.tokens, res.finished))
            tick("structured", 1, 1)
        rows = registry_mod.counter_rows(counts[p])
        reports.append(PathReport(p.value, valid, structured, rows,
                                  sum(r["count"] for r in rows if r["outcome"] == "kernel"), secs[p]))

    res = EvalModelResult(cfg.name, cfg.n_layers, steps, context, batch, seed, mode, str(dev), reports, per_step)
    if per_step:
        res.max_logit_err = max(m.max_logit_err for m in per_step)
        res.max_kl = max(m.kl for m in per_step)
        res.mean_kl = sum(m.kl for m in per_step) / len(per_step)
        res.greedy_agreement = sum(m.agreement for m in per_step) / len(per_step)
    res.wall_s = time.perf_counter() - t_start
    return res


def _random_fill(cache: DecodeCache, lens: list[int], seed: int) -> None:
    """Seeded random cache contents as if each row held lens[b] tokens."""
    gen = torch.Generator(device=cache.lens.device).manual_seed(seed + 7)
    dev = cache.lens.device
    cache.lens.copy_(torch.tensor(lens, dtype=torch.int32, device=dev) - 1)   # the step adds the last token
    for kv in cache.kv.values():
        kv.copy_(torch.randn(kv.shape, generator=gen, device=dev).to(kv.dtype))
    for st in cache.state.values():
        st.copy_((torch.randn(st.shape, generator=gen, device=dev) * 0.1).to(st.dtype))
    for cv in cache.conv.values():
        cv.copy_(torch.randn(cv.shape, generator=gen, device=dev).to(cv.dtype))


def _compare(step: int, off: torch.Tensor, on: torch.Tensor) -> StepMetric:
    err = float((on - off).abs().max())
    lp_off, lp_on = torch.log_softmax(off.float(), -1), torch.log_softmax(on.float(), -1)
    kl = float((lp_off.exp() * (lp_off - lp_on)).sum(-1).clamp_min(0).mean())
    agree = float((off.argmax(-1) == on.argmax(-1)).float().mean())
    return StepMetric(step, err, kl, agree)
