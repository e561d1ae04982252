"""perf_sweep's per-layer A/B: the K3 decode step timed with the kernel on vs off (the pair of
decoders gates/_k3.py builds), as CUDA-graph replays interleaved A B B A.

Apart from gates/_k3.py, which numerics_model imports too: only perf_sweep pins this module and
the timing library it uses, so an edit to either stales perf_sweep's verdicts alone
(gates/pins.py).
"""
from __future__ import annotations

from typing import Any

from ._k3 import Pair, prompts


def layer_ab(pair: Pair, batch: int, rounds: int, steps_per_sample: int, warmup: int = 2) -> dict[str, Any]:
    """Per-layer decode time (us) with the kernel on vs off.

    Each path prefills the same prompts, then its decode step is captured once in a CUDA graph
    (harness.model.graph.GraphedStep; the step has no host read-back on CUDA). A sample replays
    `steps_per_sample` steps from the same saved cache (restored between samples, outside the
    timed region), so every sample of a path times the same work; samples of the two paths
    are interleaved A B B A; per layer = step time / layers. Where capture fails (a kernel that
    synchronises with the host, or no CUDA device) both paths run eager steps instead, and the
    record says why (`mode`, `graph_error`).

    Until 2026-12-02 the A/B always ran eager steps that advanced the decode: the samples'
    spread reached 46% (relative noise 0.23, so a 3x-noise allowance of 69%) and the end-to-end
    check could not see a regression of a few percent. Kernel-call counters cover prefill,
    warm-up and capture: a replay runs no Python."""
    import torch

    from harness.model.cache import DecodeCache
    from harness.model.graph import GraphedStep
    from harness.toolchain.timing import elapsed_us, interleave_order, summarize

    cfg, dev = pair.cfg, pair.device
    rows = prompts(pair.tokenizer, batch, 4)
    paths = {"on": pair.model_on, "off": pair.model_off}
    caches = {k: DecodeCache.allocate(cfg, batch, 8 + warmup + steps_per_sample + 2, dev) for k in paths}
    pair.reset()
    toks, saved = {}, {}
    with torch.no_grad():
        for k, m in paths.items():
            toks[k] = m.prefill(rows, caches[k]).argmax(-1)
            saved[k] = caches[k].clone()
    steps: dict[str, Any] = {}
    graph_error = ""
    if dev.type == "cuda":
        try:
            for k, m in paths.items():
                g = GraphedStep(m, caches[k], warmup=warmup)
                g.tokens.copy_(toks[k])
                steps[k] = g.graph.replay
        except Exception as exc:  # noqa: BLE001 - recorded; both paths then run eager
            graph_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            steps = {}
            torch.cuda.synchronize()
    else:
        graph_error = "no CUDA device: eager steps"
    if not steps:
        for k, m in paths.items():
            steps[k] = (lambda m=m, k=k: m.step(toks[k], caches[k]))

    def sample(k: str) -> float:
        caches[k].copy_from(saved[k])

        def run() -> None:
            for _ in range(steps_per_sample):
                steps[k]()
        return elapsed_us(run, cuda=dev.type == "cuda") / steps_per_sample / cfg.n_layers

    with torch.no_grad():
        for k in paths:                                    # untimed: first replays, lazy inits
            for _ in range(warmup):
                sample(k)
        samples: dict[str, list[float]] = {k: [] for k in paths}
        names = list(paths)
        for idx in interleave_order(2, rounds):
            samples[names[idx]].append(sample(names[idx]))
    st = {k: summarize(v) for k, v in samples.items()}
    on_calls, off_calls = pair.kernel_calls()
    noise = max((s.p90_us - s.p10_us) / (2 * s.median_us) for s in st.values() if s.median_us > 0)
    return {"on_us": st["on"].median_us, "off_us": st["off"].median_us, "noise_rel": noise,
            "batch": batch, "n_layers": cfg.n_layers, "model_config": cfg.name,
            "mode": "eager" if graph_error else "graph", "graph_error": graph_error,
            "steps_per_sample": steps_per_sample,
            "kernel_calls_on": on_calls, "kernel_calls_off": off_calls,
            "stats": {k: v.as_dict() for k, v in st.items()}}
