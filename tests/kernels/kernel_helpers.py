"""Helpers the kernel tests share: a plain module with a unique name, imported directly (not
through `conftest`, which names another folder's module when several test folders are
collected together, e.g. `pytest tests/kernels tests/model`)."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def family_candidates(op: str, *families: str) -> list[str]:
    """Ids of the committed candidates of `op` rendered from one of these template families."""
    import json

    metas = sorted((ROOT / "kernels_generated" / op).glob("*/candidate.json"))
    return [m.parent.name for m in metas
            if (json.loads(m.read_text())["provenance"].get("template") or {}).get("family") in families]


def template_params(op: str, cid: str) -> dict:
    """The family params a committed candidate was rendered from (its provenance)."""
    import json

    meta = json.loads((ROOT / "kernels_generated" / op / cid / "candidate.json").read_text())
    return meta["provenance"]["template"]["params"]


def variant_source(op: str, cid: str, **over) -> str:
    """A committed templated candidate's family rendered from its params with `over` changed."""
    import json

    from harness.agent.families import load_family

    tmpl = json.loads((ROOT / "kernels_generated" / op / cid / "candidate.json").read_text())["provenance"]["template"]
    fam = load_family(ROOT / "prompts/kernels" / op / f"{tmpl['family']}.py.j2", op)
    return fam.render(dict(tmpl["params"], **over))


def write_variant(dest: Path, op: str, cid: str, **over) -> Path:
    """variant_source written to dest/variant/kernel.py (a scratch kernel for a compile test, no
    candidate folder: variants that spill may not be committed)."""
    path = dest / "variant" / "kernel.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(variant_source(op, cid, **over))
    return path


def kernel_entry(ptx: str, name: str) -> str:
    """The PTX body of the one kernel entry of class `name` (entry names carry `_k<class>_`)."""
    import re

    found = [e for e in ptx_entry_bodies(ptx) if re.search(rf"_k{name}_", e.split("(", 1)[0])]
    assert len(found) == 1, f"{len(found)} kernel entries of class {name}"
    return found[0]


_PTX_PROBE = r"""
import os, sys, importlib.util, pathlib, json
spec = importlib.util.spec_from_file_location("k", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
m.compile(int(sys.argv[3]), "--enable-tvm-ffi", **json.loads(sys.argv[2]))
print(json.dumps({"ptx": "\n".join(p.read_text() for p in pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"]).rglob("*.ptx"))}))
"""


def compiled_ptx(kernel_path: Path, dump_dir: Path, tp: int = 8, **static) -> str:
    """The PTX of a candidate's kernel.py compiled for sm_90a at TP `tp` (with the static key given,
    e.g. shape="nb8"), in a child process (CUTE_DSL_KEEP dumps into a fresh folder under dump_dir:
    the probe returns every .ptx it finds there, so a reused folder would mix in earlier kernels)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    dump_dir = Path(tempfile.mkdtemp(prefix="ptx_", dir=dump_dir))
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(dump_dir))
    out = subprocess.run([sys.executable, "-c", _PTX_PROBE, str(kernel_path), json.dumps(static), str(tp)],
                         capture_output=True, text=True, env=env, timeout=600, cwd=dump_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["ptx"]


def sync_counts(ptx: str) -> dict[str, int]:
    """How often the PTX synchronises and touches distributed shared memory: cluster barrier
    arrives and waits, CTA barriers, fp32 stores into a cluster CTA's shared memory, loads from one."""
    import re

    count = lambda pat: len(re.findall(pat, ptx))  # noqa: E731
    return {"arrive": count(r"barrier\.cluster\.arrive"), "wait": count(r"barrier\.cluster\.wait"),
            "bar_sync": count(r"\bbar\.sync|\bbarrier\.sync"), "st_cluster": count(r"st\.shared::cluster\.f32"),
            "ld_cluster": count(r"ld\.shared::cluster")}


def ptx_entry_bodies(ptx: str) -> list[str]:
    """Each kernel entry's PTX, from its name to its closing brace (the first `}` in column 0). What follows
    an entry (the next kernel's `// .globl` name and shared-memory declarations) depends on which kernel
    the module compiles next, not on this one, so it is left out."""
    bodies = []
    for part in ptx.split(".entry ")[1:]:
        end = part.find("\n}")
        assert end > 0, part[:200]
        bodies.append(part[:end + 2])
    return bodies


def ptx_entries_by_name(ptx: str) -> dict[str, str]:
    """Full kernel entry name -> its PTX body (the names carry the class: SkinnyGemmLarge, KdaPersist, ...)."""
    return {e.split("(", 1)[0]: e for e in ptx_entry_bodies(ptx)}


def swapab_kernels(kernel_path: Path, dump_dir: Path, tp: int, shape: str) -> tuple[str, str]:
    """(small, large): the PTX bodies of a swap-AB GEMM candidate's B <= SMALL_M kernel and its B <= 64
    kernel (SkinnyGemmLarge, or SkinnyGemmPipe with lpipe), compiled for sm_90a at TP `tp` for the named
    shape."""
    return _small_large(compiled_ptx(kernel_path, dump_dir, tp=tp, shape=shape))


@lru_cache(maxsize=None)
def source_ptx(source: str, tp: int, shape: str) -> str:
    """compiled_ptx of a kernel.py given as text (a variant_source render), once per distinct source,
    TP and shape in a test process (a base kernel serves several tests)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="src_ptx_"))
    (d / "k").mkdir()
    (d / "k" / "kernel.py").write_text(source)
    return compiled_ptx(d / "k" / "kernel.py", d, tp=tp, shape=shape)


def swapab_source_kernels(source: str, tp: int, shape: str) -> tuple[str, str]:
    """swapab_kernels of a kernel.py given as text (cached through source_ptx)."""
    return _small_large(source_ptx(source, tp, shape))


LARGE_KERNELS = ("SkinnyGemmLarge", "SkinnyGemmPipe")     # the B <= 64 kernel's class: the loop's, or lpipe's


def _small_large(ptx: str) -> tuple[str, str]:
    entries = ptx_entries_by_name(ptx)
    small = [b for n, b in entries.items() if not any(k in n for k in LARGE_KERNELS)]
    # with lpipe's lp_from both B <= 64 kernels are compiled: the pipe is the one that runs at B = 64
    # (with lp_midpipe the other one is the pipe's twin, SkinnyGemmPipeMid)
    large = [b for n, b in entries.items() if "SkinnyGemmPipe" in n and "SkinnyGemmPipeMid" not in n] or \
        [b for n, b in entries.items() if "SkinnyGemmLarge" in n]
    assert len(small) == 1 and len(large) == 1, list(entries)
    return small[0], large[0]


def without_kernel_ids(ptx: str) -> str:
    """PTX with every name that carries a candidate id made "K": two candidates' kernels compare
    instruction for instruction."""
    import re

    return re.sub(r"\b\w*cand_[0-9a-f]{12}\w*", "K", ptx)


def ptx_entries(ptx: str) -> dict[str, str]:
    """Kernel name prefix ('kernel_cutlass_gemm', 'kernel_cutlass_topk', ...) -> its PTX body."""
    return {e.split("_kernel")[0] + "_kernel": e for e in ptx_entry_bodies(ptx)}


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rendered_points(op: str, family: str, tmp_path: Path):
    """Every feasible point of a template family, rendered into tmp_path and imported:
    a list of (params, module) (nothing compiled)."""
    from harness.agent.families import load_family

    fam = load_family(ROOT / "prompts/kernels" / op / f"{family}.py.j2", op)
    out = []
    for i, c in enumerate(fam.configs()):
        (tmp_path / f"p{i}.py").write_text(fam.render(c))
        out.append((c, load_module(tmp_path / f"p{i}.py", f"{family}_point_{i}")))
    return out


def _router_case(batch: int, seed: int):
    """(op definition, seeded CUDA inputs, poisoned outputs) of one moe_router call at TP8."""
    import torch

    import reference_impls
    from harness.opdef import Point

    defn = reference_impls.get("moe_router")
    point = Point(batch=batch, tp=8)
    inp = defn.make_inputs(point, torch.Generator().manual_seed(seed), "cuda")
    return defn, inp, defn.alloc_outputs(point, "cuda", poison=True)


def check_router(defn, outs, inp, label: str) -> None:
    """The kernel's outputs against the reference on the same inputs (harness.compare)."""
    from harness.compare import compare

    res = compare(defn, outs, defn.run_reference(inp), inp)
    assert res.ok, f"{label}: {res.summary()}"


def check_router_calls(mod, compiled, batches, seed: int, label: str, after_call=None) -> None:
    """On the GPU: one synchronised moe_router call per batch (inputs seeded seed + i), each
    checked against the reference; after_call(inputs, batch) runs after each check."""
    import torch

    for i, batch in enumerate(batches):
        defn, inp, outs = _router_case(batch, seed + i)
        mod.launch(compiled, **inp, **outs)
        torch.cuda.synchronize()
        check_router(defn, outs, inp, f"{label} call {i} B={batch}")
        if after_call is not None:
            after_call(inp, batch)


def check_router_back_to_back(mod, compiled, batches, seed: int, label: str) -> list[dict]:
    """On the GPU: every call launched without a sync in between (a PDL kernel may overlap the
    call before), then each checked; returns the calls' inputs."""
    import torch

    runs = [(*_router_case(batch, seed + i), batch) for i, batch in enumerate(batches)]
    for _, inp, outs, _ in runs:
        mod.launch(compiled, **inp, **outs)
    torch.cuda.synchronize()
    for i, (defn, inp, outs, batch) in enumerate(runs):
        check_router(defn, outs, inp, f"{label} back-to-back {i} B={batch}")
    return [inp for _, inp, _, _ in runs]


def check_router_graph(mod, compiled, batch: int, seed: int, label: str, replays: int) -> list[dict]:
    """On the GPU: one eager call (workspaces exist before capture), then a CUDA graph of three
    calls on different inputs (seeded seed + i) replayed `replays` times, each checked; returns
    the calls' inputs."""
    import torch

    cases = [_router_case(batch, seed + i) for i in range(3)]
    _, inp0, outs0 = cases[0]
    mod.launch(compiled, **inp0, **outs0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _, inp, outs in cases:
            mod.launch(compiled, **inp, **outs)
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    for i, (defn, inp, outs) in enumerate(cases):
        check_router(defn, outs, inp, f"{label} call {i}")
    return [inp for _, inp, _ in cases]


def attn_res_owner(cs: int, threads: int, vec: int, h: int = 7168):
    """[CS, THREADS, NV, VEC] column of (rank, thread, vector k, element) and [CS, THREADS, NV] live mask,
    the kernel's map: vector rank*SV + k*THREADS + t, live while k*THREADS + t < SV."""
    import torch

    sv = h // (cs * vec)
    nv = -(-sv // threads)
    r = torch.arange(cs)[:, None, None]
    t = torch.arange(threads)[None, :, None]
    k = torch.arange(nv)[None, None, :]
    live = (k * threads + t < sv).expand(cs, threads, nv)
    col = ((r * sv + k * threads + t)[..., None] * vec + torch.arange(vec)).where(live[..., None], 0)
    return col, live


def clustermix_sum(per_col, col, live):
    """[..., H] fp32 -> [...]: the clustermix kernel's reduction order, step by step in fp32 (per
    thread over its vectors k in order, the 5-step warp butterfly, warps in order into the CTA
    partial, CTA partials in rank order 0..CS-1)."""
    import torch

    cs, threads, nv, _ = col.shape
    per_vec = (per_col[..., col] * live[..., None]).sum(-1)             # [..., CS, T, NV]: one vector's reduce
    thr = torch.zeros(per_vec.shape[:-1])
    for k in range(nv):                                                 # ssp += reduce(vector k)
        thr = thr + per_vec[..., k]
    lanes = thr.unflatten(-1, (threads // 32, 32))                      # [..., CS, NWARPS, 32]
    for off in (16, 8, 4, 2, 1):                                        # shfl.bfly: x += x[lane ^ off]
        lanes = lanes + lanes[..., torch.arange(32) ^ off]
    warp = lanes[..., 0]
    cta = torch.zeros(warp.shape[:-1])
    for w in range(threads // 32):                                      # warp 0: c += red[w, col]
        cta = cta + warp[..., w]
    tot = torch.zeros(cta.shape[:-1])
    for q in range(cs):                                                 # every CTA: rank order 0..CS-1
        tot = tot + cta[..., q]
    return tot


def emulate_clustermix(cs: int, threads: int, vec: int, inp: dict, nb: int) -> dict:
    """The clustermix kernel's outputs (out, new_prefix) at CS x THREADS x VEC on the CPU, every
    sum in its order (fp32): (sumsq, dot) per source, softmax in exp2, the mix, its sumsq."""
    import math

    import torch

    h, eps = inp["prefix"].shape[-1], 1e-5
    col, live = attn_res_owner(cs, threads, vec, h)
    new_prefix = (inp["prefix"].float() + inp["delta"].float()).to(torch.bfloat16).float()
    v = torch.cat([inp["blocks"].float(), new_prefix[:, None]], dim=1)           # [B, NS, H]
    ss = clustermix_sum(v * v, col, live)                                       # [B, NS]
    dt = clustermix_sum(v * inp["w_res"].float(), col, live)
    logit = dt * torch.rsqrt(ss * (1.0 / h) + eps)
    e = torch.exp2((logit - logit.amax(-1, keepdim=True)) * (1.0 / math.log(2.0)))
    p = e / e.sum(-1, keepdim=True)
    mixed = v[:, nb] * p[:, nb, None]                                           # new_prefix first, then blocks
    for j in range(nb):
        mixed = mixed + v[:, j] * p[:, j, None]
    rstd = torch.rsqrt(clustermix_sum(mixed * mixed, col, live) * (1.0 / h) + eps)[:, None]
    return {"out": (mixed * rstd * inp["w_norm"].float()).to(torch.bfloat16), "new_prefix": new_prefix.to(torch.bfloat16)}


def check_attn_res_on_strided_blocks(mod, label: str, nbs, batches, seed) -> None:
    """On the GPU: an attn_res kernel module at each block count nb, on the decoder's strided
    view (rows nb..7 of a [B, 8, H] buffer NaN, so a read past nb shows) and on compact blocks,
    against the reference (harness.compare). `seed(nb, batch)` seeds the inputs."""
    import torch

    import reference_impls
    from harness.compare import compare
    from harness.opdef import Point

    defn = reference_impls.get("attn_res")
    for nb in nbs:
        compiled = mod.compile(8, "--enable-tvm-ffi", shape=f"nb{nb}")
        for batch in batches:
            point = Point(batch=batch, tp=8, shape=f"nb{nb}")
            inp = defn.make_inputs(point, torch.Generator().manual_seed(seed(nb, batch)), "cuda")
            ref = defn.run_reference(inp)
            buf = torch.full((batch, 8, inp["blocks"].shape[-1]), float("nan"), dtype=torch.bfloat16, device="cuda")
            buf[:, :nb] = inp["blocks"]
            for blocks in (buf[:, :nb], inp["blocks"]):
                outs = defn.alloc_outputs(point, "cuda", poison=True)
                mod.launch(compiled, **dict(inp, blocks=blocks), **outs)
                torch.cuda.synchronize()
                res = compare(defn, outs, ref, inp)
                assert res.ok, f"{label} nb{nb} B={batch} stride {blocks.stride()}: {res.summary()}"


def swapab_partial_sums(m, x, w, slices):
    """A skinny_gemm swap-AB module's sums, emulated: each K-block list of `slices(plan,
    unroll)` (in the kernel's summation order) is one fp32 partial over its 32-wide blocks
    (lane k reads column 8t + 4s + q of a block: each column once), summed in that order, one
    bf16 rounding at the end; rows past N read row N-1 (clamped loads) and are dropped."""
    import torch

    B, K = x.shape
    N = w.shape[0]
    p = m.plan(K, N)
    wf = w.float()
    unroll = m.UNROLL if B <= m.SMALL_M else m.UNROLL_LARGE
    wpad = torch.cat([wf, wf[-1:].expand(p.n_blocks * m.ROWS - N, K)])
    return k_block_sums(x, wpad, slices(p, unroll))[:, :N].to(torch.bfloat16)


def k_block_sums(x, w, block_lists):
    """fp32 [B, rows of w]: one fp32 partial per list of 32-wide K blocks (lane k reads column
    8t + 4s + q of a block: each column once), the partials summed in the lists' order."""
    import torch

    perm = torch.tensor([8 * t + 4 * s + q for t in range(4) for s in range(2) for q in range(4)])
    assert sorted(perm.tolist()) == list(range(32))
    xf, wf = x.float(), w.float()
    total = torch.zeros(x.shape[0], w.shape[0])
    for blocks in block_lists:
        if blocks:
            cols = (torch.tensor(blocks)[:, None] * 32 + perm).flatten()
            total += xf[:, cols] @ wf[:, cols].t()
    return total
