"""Per-layer decode time of the K3 stack, eager and CUDA-graph, and the number of GPU kernels
each layer launches (torch profiler), with the promoted kernels off (the reference path),
on (kernels_generated/promoted.json through the registry) or both. Writes JSON to $OUT.

    OUT=/tmp/out python scripts/gpu/bench_layers.py                 # k3-tp8-rank, 8 layers, B 1/8/64
    OUT=/tmp/out python scripts/gpu/bench_layers.py --kernels both  # + the on/off table per layer
    OUT=/tmp/out python scripts/gpu/bench_layers.py --tiny          # CPU smoke run (tests use it)

Decode after context: every MLA cache row holds `--context` random latent rows and every
KDA state is random (what a step reads is what matters for time, not where it came from).
A layer whose ops synchronise with the host cannot be captured; its graph entry carries
the error instead of a time. Plain torch only (runs without pydantic).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.model.cache import DecodeCache  # noqa: E402
from harness.model.config import get_config  # noqa: E402
from harness.model.decoder import K3Decoder  # noqa: E402
from harness.model.weights import init_weights  # noqa: E402
from harness.registry import Registry  # noqa: E402
from harness.toolchain.timing import elapsed_us  # noqa: E402


DEFAULT_CONTEXT = 1024              # tokens of KV cache per sequence unless --context says otherwise


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _time_us(fn, iters: int, dev: torch.device) -> float:
    """Median per-call time over `iters` calls after one warm-up."""
    fn()
    _sync(dev)
    times = sorted(elapsed_us(fn, cuda=dev.type == "cuda") for _ in range(iters))
    return times[len(times) // 2]


def _kernels_launched(fn, dev: torch.device) -> dict:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(dev)
    evs = prof.events()
    gpu = [e for e in evs if e.device_type == torch.autograd.DeviceType.CUDA]
    top_ops = sorted({e.name for e in evs if e.name.startswith("aten::")})
    return {"gpu_kernels": len(gpu), "aten_ops": sum(1 for e in evs if e.name.startswith("aten::")),
            "distinct_aten": len(top_ops)}


def fill_context(cache: DecodeCache, context: int, gen: torch.Generator) -> None:
    dev = cache.lens.device
    cache.lens.fill_(context)
    for kv in cache.kv.values():
        kv[:, :context].copy_(torch.randn(kv[:, :context].shape, generator=gen, device=dev).to(kv.dtype))
    for st in cache.state.values():
        st.copy_((torch.randn(st.shape, generator=gen, device=dev) * 0.1).to(st.dtype))
    for cv in cache.conv.values():
        cv.copy_(torch.randn(cv.shape, generator=gen, device=dev).to(cv.dtype))


def registry_for(mode: str) -> Registry:
    """"off": no kernels (the reference path); "on": every promoted kernel (out-of-scope calls
    still fall back to the reference, counted by the registry)."""
    reg = Registry()
    if mode == "on":
        root = Path(__file__).resolve().parents[2]
        reg.load_manifest(root / "kernels_generated" / "promoted.json")
    return reg


def on_off_table(rows: list[dict]) -> list[str]:
    """One line per (batch, layer): graph (else eager) time and kernels launched, off vs on."""
    by = {(r["batch"], r["layer"], r["kernels"]): r for r in rows}
    lines = [f"{'B':>3} {'layer':>5} {'kind':>9} | {'off us':>9} {'on us':>9} {'on/off':>7} | {'kernels off':>11} {'on':>5}"]
    for (b, layer, mode), off in sorted(by.items()):
        on = by.get((b, layer, "on"))
        if mode != "off" or on is None:
            continue
        t_off, t_on = off["graph_us"] or off["eager_us"], on["graph_us"] or on["eager_us"]
        kind = f"{off['attn']}+{off['ffn']}"
        lines.append(f"{b:>3} {layer:>5} {kind:>9} | {t_off:>9.1f} {t_on:>9.1f} {t_on / t_off:>7.3f} | "
                     f"{off.get('gpu_kernels', '-'):>11} {on.get('gpu_kernels', '-'):>5}")
    return lines


def bench_batch(model: K3Decoder, batch: int, context: int, iters: int, graphs: bool) -> list[dict]:
    cfg, dev = model.cfg, model.device
    gen = torch.Generator(device=dev).manual_seed(batch)
    cache = DecodeCache.allocate(cfg, batch, context + 2, dev)
    fill_context(cache, context, gen)
    tokens = torch.randint(0, 256, (batch,), generator=gen, device=dev)
    st = model.begin(tokens, cache)
    states = []                                          # the step state entering each layer
    for i in range(cfg.n_layers):
        states.append(copy.copy(st))
        model.layer(i, st, cache)
    rows = []
    for i in range(cfg.n_layers):
        def run(i=i):
            model.layer(i, copy.copy(states[i]), cache)
        row = {"layer": i + 1, "attn": "mla" if cfg.is_mla(i) else "kda", "ffn": "dense" if cfg.is_dense(i) else "moe",
               "batch": batch, "eager_us": _time_us(run, iters, dev), **_kernels_launched(run, dev),
               "graph_us": None, "graph_error": None}
        if graphs and dev.type == "cuda":
            try:
                g, st_g = torch.cuda.CUDAGraph(), copy.copy(states[i])
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    model.layer(i, copy.copy(states[i]), cache)
                torch.cuda.current_stream().wait_stream(side)
                with torch.cuda.graph(g):
                    model.layer(i, st_g, cache)
                row["graph_us"] = _time_us(g.replay, iters, dev)
            except Exception as exc:  # noqa: BLE001 - a host sync inside an op: report it
                row["graph_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                torch.cuda.synchronize()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="k3-tp8-rank")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batches", default=None, help="comma list (default 1,8,64; --tiny 1,2)")
    ap.add_argument("--context", type=int, default=DEFAULT_CONTEXT)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--no-graphs", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="tiny config on any device: a smoke run")
    ap.add_argument("--kernels", choices=("off", "on", "both"), default="off",
                    help="promoted kernels off (reference path), on, or both (an on/off table)")
    a = ap.parse_args(argv)
    name_context = a.context                 # the file's name: the context asked for (--tiny sets its own)
    if a.tiny:
        a.config, a.layers, a.context, a.iters = "tiny", None, 8, 2
        a.batches = a.batches or "1,2"
    a.batches = a.batches or "1,8,64"
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = get_config(a.config, a.layers)
    t0 = time.perf_counter()
    weights = init_weights(cfg, 0, dev)
    init_s = time.perf_counter() - t0
    modes = ["off", "on"] if a.kernels == "both" else [a.kernels]
    result = {"config": cfg.name, "n_layers": cfg.n_layers, "context": a.context, "device": str(dev),
              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
              "torch": torch.__version__, "weights_init_s": init_s, "rows": [], "registry": {}}
    with torch.no_grad():
        for mode in modes:
            reg = registry_for(mode)
            model = K3Decoder(cfg, weights, reg)
            for b in (int(x) for x in a.batches.split(",")):
                rows = bench_batch(model, b, a.context, a.iters, not a.no_graphs)
                result["rows"] += [{**r, "kernels": mode} for r in rows]
            result["registry"][mode] = {f"{k.op} {k.outcome.value} {k.reason.value}": n
                                        for k, n in sorted(reg.counters().items(), key=lambda kv: str(kv[0]))}
            if mode == "on":   # which candidate of each op the "on" side loaded, so the table is traceable
                result["promoted"] = {e.op: ",".join(x.candidate for x in reg.entries(e.op)) for e in reg.entries()}
    if a.kernels == "both":
        result["on_off_table"] = on_off_table(result["rows"])
        print("\n".join(result["on_off_table"]))
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / json_name(cfg.name, name_context)).write_text(json.dumps(result, indent=2) + "\n")
    return result


def json_name(config: str, context: int) -> str:
    """bench_layers_<config>.json at the default context, bench_layers_<config>_ctx<N>.json at
    another, so one $OUT keeps runs of several contexts (session 36's 8K run was overwritten by its
    32K run of the same config)."""
    return f"bench_layers_{config}.json" if context == DEFAULT_CONTEXT else f"bench_layers_{config}_ctx{context}.json"


if __name__ == "__main__":
    main()
