"""The K3 decode path with one op's candidate on vs off, for numerics_model and perf_sweep.

Two decoders share one set of seeded weights; each has its own Registry: `on` has the
candidate registered for its op, `off` has it registered AND switched off by the kill
switch (so the off run proves the switch: zero kernel calls). Promoted kernels of other ops
(kernels_generated/promoted.json) are registered in both, so the A/B isolates this op.

`lockstep` decodes both paths on the same tokens (teacher forcing on the kernel-on path's
choice), comparing the next-token distributions at every step; `layer_ab` times one decode
step with the kernel on vs off, interleaved A B B A.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

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

    @property
    def device(self):
        return self.model_on.device

    def reset(self) -> None:
        self.reg_on.reset_counters()
        self.reg_off.reset_counters()

    def kernel_calls(self) -> tuple[int, int]:
        from harness.registry import Outcome

        def n(reg) -> int:
            return sum(c for k, c in reg.counters().items() if k.op == self.op and k.outcome is Outcome.KERNEL)
        return n(self.reg_on), n(self.reg_off)

    def trace(self) -> dict[str, Any]:
        from harness.registry import counter_rows

        return {"on": [r for r in counter_rows(self.reg_on.counters()) if r["op"] == self.op],
                "off": [r for r in counter_rows(self.reg_off.counters()) if r["op"] == self.op],
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
    return base, n


def build_pair(op: str, candidate_dir, root, model_config: str, default_layers: int, device: str,
               seed: int = DEFAULT_SEED) -> Pair:
    import torch

    from harness.model.config import get_config
    from harness.model.decoder import K3Decoder
    from harness.model.tokenizer import ByteTokenizer
    from harness.model.weights import init_weights
    from harness.registry import KernelScope, Registry
    from harness.toolchain.candidate import load_candidate

    preset, layers = parse_model_config(model_config, default_layers)
    cfg = get_config(preset, layers or None)
    cand = load_candidate(op, candidate_dir)
    manifest = root / "kernels_generated" / "promoted.json"
    regs = []
    for _ in range(2):
        reg = Registry()
        reg.load_manifest(manifest, root / "kernels_generated")
        reg.register(op, KernelScope.from_json(cand.scope.to_json()), candidate=cand.id, candidate_dir=cand.path)
        regs.append(reg)
    regs[1].disable(op)
    with torch.no_grad():
        w = init_weights(cfg, seed, device)
    return Pair(op, cfg, K3Decoder(cfg, w, regs[0]), K3Decoder(cfg, w, regs[1]), regs[0], regs[1],
                ByteTokenizer(cfg.vocab, cfg.eos_id, cfg.bos_id))


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


def lockstep(pair: Pair, rows: list[list[int]], steps: int, params, constraint=None, schema=None,
             context_fill: int = 0, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Decode both paths on the same tokens for `steps` steps; compare every step."""
    import torch

    from harness.model.cache import DecodeCache
    from harness.model.grammar import validate
    from harness.model.sampling import make_generator, sample

    t0 = time.perf_counter()
    cfg, dev, bsz = pair.cfg, pair.device, len(rows)
    max_len = context_fill + max(len(r) for r in rows) + steps + 2
    c_on = DecodeCache.allocate(cfg, bsz, max_len, dev)
    c_off = DecodeCache.allocate(cfg, bsz, max_len, dev)
    if context_fill:
        fill_context(pair, c_on, context_fill, seed)
        c_off.copy_from(c_on)
    pair.reset()
    lo_on = pair.model_on.prefill(rows, c_on)
    lo_off = pair.model_off.prefill(rows, c_off)
    g_on, g_off = make_generator(params, dev), make_generator(params, dev)
    matchers = constraint.matchers(bsz) if constraint is not None else []
    out: list[list[int]] = [[] for _ in range(bsz)]
    done = [False] * bsz
    max_kl = max_rel = 0.0
    agree = same = total = 0.0
    n = nonfinite = 0
    for n in range(1, steps + 1):
        kl, rel, ag = _step_metrics(lo_off, lo_on)
        if not (math.isfinite(kl) and math.isfinite(rel)):
            kl, rel = NONFINITE, NONFINITE          # finite in JSON, fails every threshold
            nonfinite += 1
        max_kl, max_rel, agree = max(max_kl, kl), max(max_rel, rel), agree + ag
        allowed = constraint.allowed_mask(matchers).to(dev) if constraint is not None else None
        t_on = sample(lo_on, params, g_on, allowed)
        t_off = sample(lo_off, params, g_off, allowed)
        same += float((t_on == t_off).sum())
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
        lo_on = pair.model_on.step(t_on, c_on)
        lo_off = pair.model_off.step(t_on, c_off)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    on_calls, off_calls = pair.kernel_calls()
    res: dict[str, Any] = {"tokens": n, "batch": bsz, "prompt_tokens": max(len(r) for r in rows),
                           "context": context_fill + max(len(r) for r in rows), "context_synthesized": context_fill,
                           "greedy_agreement": agree / total if total else 0.0,
                           "sampling_agreement": same / total if total else 0.0,
                           "max_kl": max_kl, "max_logit_rel_err": max_rel,
                           "kernel_calls_on": on_calls, "kernel_calls_off": off_calls, "nonfinite_steps": nonfinite,
                           "trace": pair.trace(), "wall_s": round(time.perf_counter() - t0, 3)}
    if constraint is not None:
        texts = [pair.tokenizer.decode(o) for o in out]
        res["valid"] = all(done) and all(validate(schema, t) for t in texts)
        res["finished_rows"] = sum(done)
        res["outputs"] = [t[:200] for t in texts]
    return res


def layer_ab(pair: Pair, batch: int, rounds: int, steps_per_sample: int, warmup: int = 2) -> dict[str, Any]:
    """Per-layer decode time (us) with the kernel on vs off: eager decode steps (the
    reference ops of other call sites synchronise with the host, so no CUDA graph), timed
    with CUDA events, interleaved A B B A; per layer = step time / layers."""
    import torch

    from harness.model.cache import DecodeCache
    from harness.toolchain.timing import interleave_order, summarize

    cfg, dev = pair.cfg, pair.device
    rows = prompts(pair.tokenizer, batch, 4)
    n_steps = warmup + rounds * 2 * steps_per_sample + 2
    paths = {"on": pair.model_on, "off": pair.model_off}
    caches = {k: DecodeCache.allocate(cfg, batch, 8 + n_steps, dev) for k in paths}
    toks = {}
    pair.reset()
    for k, m in paths.items():
        toks[k] = m.prefill(rows, caches[k]).argmax(-1)
        for _ in range(warmup):
            toks[k] = m.step(toks[k], caches[k]).argmax(-1)
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in paths}
    names = list(paths)
    for idx in interleave_order(2, rounds):
        k = names[idx]
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(steps_per_sample):
            paths[k].step(toks[k], caches[k])
        b.record()
        b.synchronize()
        samples[k].append(a.elapsed_time(b) * 1e3 / steps_per_sample / cfg.n_layers)
    st = {k: summarize(v) for k, v in samples.items()}
    on_calls, off_calls = pair.kernel_calls()
    noise = max((s.p90_us - s.p10_us) / (2 * s.median_us) for s in st.values() if s.median_us > 0)
    return {"on_us": st["on"].median_us, "off_us": st["off"].median_us, "noise_rel": noise,
            "batch": batch, "n_layers": cfg.n_layers, "model_config": cfg.name, "mode": "eager",
            "kernel_calls_on": on_calls, "kernel_calls_off": off_calls,
            "stats": {k: v.as_dict() for k, v in st.items()}}
