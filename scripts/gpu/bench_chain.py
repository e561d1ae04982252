"""The moe_router in its place in the decode step: attn_res + post-attention RMSNorm (the
promoted kernel, or torch.compile of its reference), then the router on its output, under
CUDA-graph replay. Answers whether a router's PDL weight prefetch still pays when the kernel
before it is not another router call (bench_kernels.py times back-to-back calls of one op).

    source scripts/gpu/setup.sh && python3 scripts/gpu/bench_chain.py [--routers ffcc5b,fd8cb4] \
        [--attn ID_PREFIX] [--batches 1,8,64] [--nb 4] [--rounds 10]

Per batch: us per (attn_res, router) pair for each router and for attn_res alone, interleaved
A B B A in one process (timing.time_interleaved), inputs and weights rotated past L2; the
router's share is pair minus attn_res alone. Writes $OUT/bench_chain[_<attn id>].json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import reference_impls  # noqa: E402
from harness.errors import UserError  # noqa: E402
from harness.opdef import Point  # noqa: E402
from harness.promotion import read_manifest  # noqa: E402
from harness.toolchain import timing  # noqa: E402
from harness.toolchain.candidate import load_candidate  # noqa: E402
from harness.toolchain.gpu_eval import compiled_reference  # noqa: E402

import bench_kernels as bk  # noqa: E402


def promoted_id(op: str) -> str:
    return next(e["candidate"] for e in read_manifest(ROOT) if e["op"] == op)


def candidate(op: str, ref: str) -> tuple[str, ModuleType]:
    """(id, kernel module) of the candidate `ref` (an id or a unique prefix)."""
    try:
        cand = load_candidate(op, ref)
    except UserError as exc:
        raise SystemExit(f"bench_chain: {exc}") from None
    return cand.id, bk.load_kernel(str(cand.path))


def main() -> None:
    ap = argparse.ArgumentParser(description="attn_res -> moe_router chain under CUDA graphs")
    ap.add_argument("--routers", default="", help="router candidate id prefixes (default: the promoted one)")
    ap.add_argument("--attn", default="", help="attn_res candidate id prefix (default: the promoted one)")
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--nb", type=int, default=4, help="attn_res block count (shape nbN)")
    ap.add_argument("--rounds", type=int, default=10)
    bk.add_max_copies_arg(ap)
    args = ap.parse_args()
    os.environ.setdefault("CUTE_DSL_ARCH", bk.arch_of_device())
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    ar_def, rt_def = reference_impls.get("attn_res"), reference_impls.get("moe_router")
    ar_id, ar_mod = candidate("attn_res", args.attn or promoted_id("attn_res"))
    routers = [candidate("moe_router", p) for p in (args.routers.split(",") if args.routers else [promoted_id("moe_router")])]
    result: dict = {"device": torch.cuda.get_device_name(), "attn_res": ar_id, "nb": args.nb,
                    "max_copies": args.max_copies, "rows": []}
    rt_ref = compiled_reference(rt_def, dynamic=None)      # into the rotated outputs, as the kernels write
    for b in [int(x) for x in args.batches.split(",")]:
        ap_, rp = Point(batch=b, tp=8, shape=f"nb{args.nb}"), Point(batch=b, tp=8)
        ar_sets, ar_outs = bk.rotated_sets(ar_def, ap_, args.max_copies)
        rt_sets, rt_outs = bk.rotated_sets(rt_def, rp, args.max_copies)
        n = min(len(ar_sets), len(rt_sets))
        ar_k = ar_mod.compile(8, "--enable-tvm-ffi", **bk.static_for(ar_def, ap_))

        def attn(i: int) -> None:
            ar_mod.launch(ar_k, **bk.kernel_tensors(ar_def, ar_sets[i], ar_outs[i]))

        alone_name = f"attn_res {ar_id[:6]} alone"
        def then_compiled_router(i: int) -> None:
            attn(i)
            rt_ref(dict(rt_sets[i], x=ar_outs[i]["out"]), rt_outs[i])

        def then_router(mod: ModuleType, k) -> Callable[[int], None]:
            def call(i: int) -> None:
                attn(i)
                mod.launch(k, **bk.kernel_tensors(rt_def, dict(rt_sets[i], x=ar_outs[i]["out"]), rt_outs[i]))
            return call

        impls: dict[str, Callable[[int], None]] = {alone_name: attn, "+ router compile": then_compiled_router}
        for rid, mod in routers:
            impls[f"+ router {rid[:6]}"] = then_router(mod, mod.compile(8, "--enable-tvm-ffi"))
        for f in impls.values():
            f(0)
        torch.cuda.synchronize()
        stats = timing.time_interleaved(impls, n, calls_per_graph=bk.CALLS_PER_GRAPH, rounds=args.rounds)
        alone = stats[alone_name].median_us
        us = {k: s.median_us for k, s in stats.items()}
        result["rows"].append({"batch": b, "us": us})
        print(f"B={b:>2}  " + "  ".join(f"{k}: {v:.2f}" + ("" if k == alone_name else f" (router {v - alone:.2f})")
                                     for k, v in us.items()), flush=True)
        del ar_sets, ar_outs, rt_sets, rt_outs
        torch.cuda.empty_cache()
    name = "bench_chain.json" if not args.attn else f"bench_chain_{ar_id[:6]}.json"
    (out_dir / name).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
