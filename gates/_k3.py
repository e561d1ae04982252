"""The K3 decode path with one op's candidate on vs off, for numerics_model and perf_sweep.

Two decoders share one set of seeded weights; each has its own Registry: `on` has the
candidate registered for its op, `off` has it registered AND switched off by the kill
switch (so the off run proves the switch: zero kernel calls). Promoted kernels of other ops
(kernels_generated/promoted.json) are registered in both, so the A/B isolates this op. The
op's own promoted kernels stay on the `on` path beside the candidate, as they would after
its promotion: one of the same scope is replaced, a narrower one keeps its calls, and the
candidate's own calls are what the gates count.
With `noise=True` a third decoder runs the op through a benign perturbation of its
reference (gates/_benign.py): the model's own noise floor, measured in the same run.

`lockstep` decodes every path on the same tokens (teacher forcing on the kernel-on path's
choice), comparing each path's next-token distribution with the off path's at every step
(per-step series: KL, logit rel err, rows whose chosen id sets differ). perf_sweep's timing of
the decode step on vs off lives in gates/_layer_ab.py, so that only perf_sweep pins it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, cast

DEFAULT_SEED = 20260
NONFINITE = 1e30           # recorded for a step whose logits hold NaN/Inf (evidence JSON has no Inf)


@dataclass
class Pair:
    op: str
    cfg: Any
    model_on: Any
    model_off: Any
    reg_on: Any
    reg_off: Any
    tokenizer: Any
    model_noise: Any = None        # the benign-perturbation path (None: not measured)
    reg_noise: Any = None
    noise_kind: str = ""
    fused_off: tuple[str, ...] = ()   # fused ops switched off on every path (`fused_over`)
    candidate: str = ""                # the on path's candidate id: its calls are kernel_calls()[0]

    @property
    def device(self):
        return self.model_on.device

    def reset(self) -> None:
        for reg in (self.reg_on, self.reg_off, self.reg_noise):
            if reg is not None:
                reg.reset_counters()

    def noise_calls(self) -> int:
        from harness.registry import Outcome

        if self.reg_noise is None:
            return 0
        return sum(c for k, c in self.reg_noise.counters().items() if k.op == self.op and k.outcome is Outcome.KERNEL)

    def kernel_calls(self) -> tuple[int, int]:
        """(the candidate's calls on the on path, calls of any kernel of the op on the off path)."""
        from harness.registry import Outcome

        on = self.reg_on.candidate_counters().get((self.op, self.candidate), 0)
        off = sum(c for k, c in self.reg_off.counters().items() if k.op == self.op and k.outcome is Outcome.KERNEL)
        return on, off

    def trace(self) -> dict[str, Any]:
        from harness.registry import counter_rows

        return {"on": [r for r in counter_rows(self.reg_on.counters()) if r["op"] == self.op],
                "off": [r for r in counter_rows(self.reg_off.counters()) if r["op"] == self.op],
                "on_by_candidate": {c: n for (o, c), n in sorted(self.reg_on.candidate_counters().items())
                                    if o == self.op},
                "errors_on": self.reg_on.errors()}


def parse_model_config(name: str, default_layers: int) -> tuple[str, int]:
    """"k3-tp8-rank" or "k3-tp8-rank:3" -> (preset, layers). The tiny config keeps its own."""
    from harness.errors import UserError

    base, _, layers = name.partition(":")
    if not layers:
        return base, (0 if base == "tiny" else default_layers)
    try:
        n = int(layers)
    except ValueError:
        raise UserError(f"model config '{name}': layer count '{layers}' is not an integer") from None
    if n < 1:                       # 0 would silently mean the preset's own count (get_config's None)
        raise UserError(f"model config '{name}': the layer count must be >= 1")
    return base, n


def build_pair(op: str, candidate_dir, root, model_config: str, default_layers: int, device: str,
               seed: int = DEFAULT_SEED, noise: bool = False, on_fn=None) -> Pair:
    """`on_fn`: register this callable as the on path's kernel instead of the candidate
    folder (experiments and tests: a test-only "kernel" through the same machinery)."""
    import torch

    from harness.model.config import get_config
    from harness.model.decoder import K3Decoder
    from harness.model.tokenizer import ByteTokenizer
    from harness.model.weights import init_weights
    from harness.registry import KernelScope, Registry

    preset, layers = parse_model_config(model_config, default_layers)
    cfg = get_config(preset, layers or None)
    manifest = root / "kernels_generated" / "promoted.json"
    if on_fn is None:
        from harness.toolchain.candidate import load_candidate

        cand = load_candidate(op, candidate_dir)
        scope = KernelScope.from_json(cand.scope.to_json())
        kw: dict[str, Any] = {"candidate": cand.id, "candidate_dir": cand.path}
    else:
        scope, kw = _any_scope(), {"fn": on_fn, "candidate": "test-fn"}
    fused = fused_over(op)
    regs = []
    for _ in range(2):
        reg = Registry(check_shapes=on_fn is None or cfg.is_k3_rank)
        reg.load_manifest(manifest, root / "kernels_generated")
        reg.register(op, scope, **kw)
        reg.disable(*fused)
        regs.append(reg)
    regs[1].disable(op)
    with torch.no_grad():
        w = init_weights(cfg, seed, device)
    pair = Pair(op, cfg, K3Decoder(cfg, w, regs[0]), K3Decoder(cfg, w, regs[1]), regs[0], regs[1],
                ByteTokenizer(cfg.vocab, cfg.eos_id, cfg.bos_id), fused_off=fused, candidate=kw["candidate"])
    if noise:
        from ._benign import benign_fn, describe

        reg = Registry(check_shapes=cfg.is_k3_rank)       # tiny widths: the benign fn takes any size
        reg.load_manifest(manifest, root / "kernels_generated")
        reg.unregister(op)                                 # the benign fn is the op's only kernel here
        reg.register(op, _any_scope(), benign_fn(op, seed), candidate="benign-perturbation")
        reg.disable(*fused)
        pair.model_noise, pair.reg_noise, pair.noise_kind = K3Decoder(cfg, w, reg), reg, describe(op)
    return pair


def fused_over(op: str) -> tuple[str, ...]:
    """The fused ops whose kernel, where it runs, replaces the decoder's calls of `op` (their
    definitions' extra["replaces"]; gemm_situ_and_mul replaces skinny_gemm + situ_and_mul). Both
    model paths and the noise path run with them off: with the promoted fused kernel on, the
    gate's batch never reached situ_and_mul (0 calls on the H200, 2026-12-02), though the decode
    path calls it wherever the fused kernel's scope ends."""
    import reference_impls

    return tuple(sorted(d.name for d in reference_impls.all_ops()
                        if op in cast("tuple[str, ...]", d.extra.get("replaces", ()))))


def _any_scope():
    from harness.registry import KernelScope

    return KernelScope(archs=(), tp=(), batch=(1, 1 << 30), dtypes=())


class _Recorder:
    """Wraps a path's registry: keeps the id sets of the op's integer outputs (the chosen
    experts of moe_router) per call site, for the current step."""

    def __init__(self, reg, op: str) -> None:
        self.reg, self.op = reg, op
        self.ids: dict[str, list[frozenset[int]]] = {}

    def run(self, op: str, inputs, *, tp: int, site: str = "", **static):
        out = self.reg.run(op, inputs, tp=tp, site=site, **static)
        if op == self.op:
            for name, t in out.items():
                if not t.is_floating_point() and t.dim() == 2:
                    self.ids[f"{site}:{name}"] = [frozenset(r) for r in t.tolist()]
        return out

    def __getattr__(self, name: str):
        return getattr(self.reg, name)


def prompts(tok, batch: int, length: int, offset: int = 0) -> list[list[int]]:
    """BOS + the shipped prompts (harness/model/data/prompts.jsonl), `length` tokens per row."""
    import json
    from importlib import resources

    text = resources.files("harness.model").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    items = [json.loads(line)["text"] for line in text.splitlines() if line.strip()]
    rows = []
    for b in range(batch):
        ids = [tok.bos_token_id]
        j = offset + b
        while len(ids) < length:
            ids += tok.encode(items[j % len(items)] + "\n", bos=False)
            j += 1
        rows.append(ids[:length])
    return rows


def fill_context(pair: Pair, cache, n_tokens: int, seed: int) -> None:
    """Synthesize an n-token context in every MLA layer's latent KV cache: the rows the layer
    writes for random byte tokens, from rmsnorm(embedding) through its kv_a projection and
    kv_a_norm. K3's MLA is NoPE (a token's position is only its slot), so these rows and
    the real prompt tokens appended after them form a valid n + P token context. KDA layers
    carry a fixed-size state and see only the real prompt tokens."""
    import torch

    cfg, w = pair.cfg, pair.model_on.w
    dev = pair.device
    g = torch.Generator(device="cpu").manual_seed(seed)
    toks = torch.randint(0, 256, (n_tokens,), generator=g).to(dev)
    chunk = 4096
    for i, kv in cache.kv.items():
        p = f"layers.{i}.mla."
        wa = w[p + "qkv_a"].float()
        for s in range(0, n_tokens, chunk):
            x = w["embed"][toks[s:s + chunk]].float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.eps)
            qkv = x @ wa.t()
            kv_c = qkv[:, cfg.q_lora:cfg.q_lora + cfg.kv_lora]
            k_pe = qkv[:, cfg.q_lora + cfg.kv_lora:]
            kv_c = kv_c * torch.rsqrt(kv_c.pow(2).mean(-1, keepdim=True) + cfg.eps) * w[p + "kv_a_norm"].float()
            kv[:, s:s + x.shape[0]] = torch.cat([kv_c, k_pe], -1).to(kv.dtype)
    cache.lens.fill_(n_tokens)


def _step_metrics(off, on) -> tuple[float, float, float]:
    """Per row of one step: max KL(p_off || p_on), max ||on - off|| / ||off||, argmax agreements."""
    import torch

    lp_off = torch.log_softmax(off.double(), -1)
    lp_on = torch.log_softmax(on.double(), -1)
    kl = (lp_off.exp() * (lp_off - lp_on)).sum(-1).clamp_min(0)
    rel = (on.double() - off.double()).norm(dim=-1) / off.double().norm(dim=-1).clamp_min(1e-30)
    agree = (off.argmax(-1) == on.argmax(-1)).sum()
    return float(kl.max()), float(rel.max()), float(agree)


def _sig(v: float) -> float:
    return float(f"{v:.4g}")


class _Series:
    """Per-step drift of one path against the off path."""

    def __init__(self) -> None:
        self.kl: list[float] = []
        self.rel: list[float] = []
        self.flips: list[int] = []
        self.agree = 0.0
        self.nonfinite = 0

    def add(self, off, other, flips: int) -> None:
        kl, rel, ag = _step_metrics(off, other)
        if not (math.isfinite(kl) and math.isfinite(rel)):
            kl, rel = NONFINITE, NONFINITE          # finite in JSON, fails every threshold
            self.nonfinite += 1
        self.kl.append(kl)
        self.rel.append(rel)
        self.flips.append(flips)
        self.agree += ag

    def summary(self, total: float) -> dict[str, Any]:
        first = next((i + 1 for i, (k, f) in enumerate(zip(self.kl, self.flips)) if k > 0 or f > 0), 0)
        return {"greedy_agreement": self.agree / total if total else 0.0,
                "max_kl": max(self.kl, default=0.0), "mean_kl": sum(self.kl) / len(self.kl) if self.kl else 0.0,
                "max_logit_rel_err": max(self.rel, default=0.0), "nonfinite_steps": self.nonfinite,
                "first_divergence_step": first, "steps_with_flips": sum(f > 0 for f in self.flips),
                "first_flip_step": next((i + 1 for i, f in enumerate(self.flips) if f > 0), 0),
                "kl_per_step": [_sig(v) for v in self.kl], "logit_rel_err_per_step": [_sig(v) for v in self.rel],
                "expert_flips_per_step": list(self.flips)}


def lockstep(pair: Pair, rows: list[list[int]], steps: int, params, constraint=None, schema=None,
             context_fill: int = 0, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Decode every path on the same tokens for `steps` steps; compare every step.
    Per step: KL(p_off || p_on), logit rel err, and the rows (x call sites) whose chosen id
    sets differ from the off path's (expert flips); the same for the noise path if any."""
    import torch

    from harness.model.cache import DecodeCache
    from harness.model.grammar import validate
    from harness.model.sampling import make_generator, sample

    from ._benign import set_difference_counts

    t0 = time.perf_counter()
    cfg, dev, bsz = pair.cfg, pair.device, len(rows)
    max_len = context_fill + max(len(r) for r in rows) + steps + 2
    models = {"on": pair.model_on, "off": pair.model_off}
    if pair.model_noise is not None:
        models["noise"] = pair.model_noise
    caches = {k: DecodeCache.allocate(cfg, bsz, max_len, dev) for k in models}
    if context_fill:
        fill_context(pair, caches["on"], context_fill, seed)
        for k in models:
            if k != "on":
                caches[k].copy_from(caches["on"])
    recs = {k: _Recorder(m.registry, pair.op) for k, m in models.items()}
    saved = {k: m.registry for k, m in models.items()}
    pair.reset()
    try:
        for k, m in models.items():
            m.registry = recs[k]
        logits = {k: m.prefill(rows, caches[k]) for k, m in models.items()}
        gens = {k: make_generator(params, dev) for k in models}
        matchers = constraint.matchers(bsz) if constraint is not None else []
        out: list[list[int]] = [[] for _ in range(bsz)]
        done = [False] * bsz
        series = {k: _Series() for k in models if k != "off"}
        same = same_noise = total = 0.0
        n = 0
        for n in range(1, steps + 1):
            for k, ser in series.items():
                ser.add(logits["off"], logits[k], set_difference_counts(recs[k].ids, recs["off"].ids))
            allowed = constraint.allowed_mask(matchers).to(dev) if constraint is not None else None
            toks_of = {k: sample(logits[k], params, gens[k], allowed) for k in models}
            t_on = toks_of["on"]
            same += float((t_on == toks_of["off"]).sum())
            same_noise += float((toks_of.get("noise", t_on) == toks_of["off"]).sum())
            total += bsz
            toks = t_on.tolist()
            if constraint is not None:
                constraint.advance(matchers, toks)
                for b, t in enumerate(toks):
                    if not done[b]:
                        if t == cfg.eos_id:
                            done[b] = True
                        else:
                            out[b].append(t)
                if all(done):
                    break
            if n == steps:
                break
            logits = {k: m.step(t_on, caches[k]) for k, m in models.items()}
    finally:
        for k, m in models.items():
            m.registry = saved[k]
    if dev.type == "cuda":
        torch.cuda.synchronize()
    on_calls, off_calls = pair.kernel_calls()
    res: dict[str, Any] = {"tokens": n, "batch": bsz, "prompt_tokens": max(len(r) for r in rows),
                           "context": context_fill + max(len(r) for r in rows), "context_synthesized": context_fill,
                           **series["on"].summary(total),
                           "sampling_agreement": same / total if total else 0.0,
                           "kernel_calls_on": on_calls, "kernel_calls_off": off_calls,
                           "trace": pair.trace()}
    if "noise" in series:
        res["noise"] = {"perturbation": pair.noise_kind, "calls": pair.noise_calls(),
                        "sampling_agreement": same_noise / total if total else 0.0, **series["noise"].summary(total)}
    if constraint is not None:
        texts = [pair.tokenizer.decode(o) for o in out]
        res["valid"] = all(done) and all(validate(schema, t) for t in texts)
        res["finished_rows"] = sum(done)
        res["outputs"] = [t[:200] for t in texts]
    res["wall_s"] = round(time.perf_counter() - t0, 3)
    return res
