"""gemm_situ_and_mul's swapab_situ family (skinny_gemm's swap-AB GEMM with SiTU in the epilogue),
checked on the CPU through its rendered module: the epilogue's pairing of each gate total with its
up total against the MMA accumulator layout (out_pos), every output column and token written once,
and the kernel's sums emulated in PyTorch (K partition and summation order, bf16 gate_up, SiTU)
against the reference. The tanh.approx math itself runs only on the GPU (gpu-marked test)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
import torch

import reference_impls
from harness.compare import compare
from harness.opdef import Point
from reference_impls._common import situ
from reference_impls.gemm_situ_and_mul import SHAPE_NAMES, gemm_kn

from kernel_helpers import ROOT, load_module, swapab_partial_sums

FAMILY = ROOT / "prompts/kernels/gemm_situ_and_mul/swapab_situ.py.j2"


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p for p in pts if p["op"] == "gemm_situ_and_mul" and p["family"] == "swapab_situ"]


@lru_cache(maxsize=None)
def _module(params_json: str):
    import tempfile

    from harness.agent.families import load_family

    fam = load_family(FAMILY, "gemm_situ_and_mul")
    d = Path(tempfile.mkdtemp(prefix="gemm-situ-family-"))
    (d / "kernel.py").write_text(fam.render(json.loads(params_json)))
    return load_module(d / "kernel.py", f"gemm_situ_family_{abs(hash(params_json))}")


PARAMS = [pytest.param(json.dumps(p["params"], sort_keys=True), id=p["label"]) for p in _points()]


def test_there_is_a_human_point():
    assert PARAMS


@pytest.mark.parametrize("params_json", PARAMS)
@pytest.mark.parametrize("m_tiles", [1, 2])
def test_each_gate_total_meets_its_up_total_and_every_output_is_written_once(params_json, m_tiles):
    pt = json.loads(params_json)
    pt.update(m_tiles=m_tiles, unroll=min(pt["unroll"], 8 // m_tiles), unroll_large=min(pt["unroll_large"], 4 // m_tiles))
    m = _module(json.dumps(pt, sort_keys=True))
    assert m.SITU and m.OUT_COLS * 2 == m.ROWS
    hits = torch.zeros(m.OUT_COLS, 8, dtype=torch.int32)
    for hidx in range(m.FRAG // 2):
        for ln in range(32):
            idx, col, tok = m.situ_slot(hidx, ln)
            mt, g = col // 8, col % 8
            # the gate slot holds tile row g of m-tile mt (the gate half), its partner row g + 8 (the up half)
            assert m.out_pos(idx, ln) == (mt * 16 + g, tok)
            assert m.out_pos(idx + 2, ln) == (mt * 16 + g + 8, tok)
            hits[col, tok] += 1
    assert bool((hits == 1).all())


def _cta_weight_rows(m, i: int, n_blocks: int) -> torch.Tensor:
    """The weight row behind each of the kernel's n_blocks * ROWS tile rows: tile row mt*16 + h*8 + g
    of CTA bn loads the gate (h = 0) or up (h = 1) row of column bn * OUT_COLS + mt * 8 + g, clamped
    to the last column (the kernel's `wrow`)."""
    rows = []
    for bn in range(n_blocks):
        for mt in range(m.M_TILES):
            for h in range(2):
                for g in range(8):
                    rows.append(h * i + min(bn * m.OUT_COLS + mt * 8 + g, i - 1))
    return torch.tensor(rows)


def emulate(m, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The kernel's output: the swap-AB sums over its tile rows (the K partition and order of
    skinny_gemm's swapab), gate and up totals rounded to bf16, SiTU in fp32, one bf16 rounding."""
    i = w.shape[0] // 2
    p = m.plan(w.shape[1], w.shape[0])
    tiles = w[_cta_weight_rows(m, i, p.n_blocks)]
    sums = swapab_partial_sums(m, x, tiles, lambda p, unroll: (m.slice_blocks(p, rank, warp, unroll)
                                                                for rank in range(p.ck) for warp in range(m.WARPS)))
    sums = sums.float().view(x.shape[0], p.n_blocks, m.M_TILES, 2, 8)        # [B, CTA, m-tile, gate|up, g]
    gate = sums[:, :, :, 0].reshape(x.shape[0], -1)[:, :i]
    up = sums[:, :, :, 1].reshape(x.shape[0], -1)[:, :i]
    return situ(gate, up).to(torch.bfloat16)


@pytest.mark.parametrize("params_json", PARAMS)
@pytest.mark.parametrize("shape,tp,batch", [("shared_gate_up", 8, 1), ("shared_gate_up", 16, 8),
                                            ("dense_gate_up", 16, 3), ("dense_gate_up", 8, 5)])
def test_emulation_matches_reference(params_json, shape, tp, batch):
    m = _module(params_json)
    defn = reference_impls.get("gemm_situ_and_mul")
    pt = Point(tp=tp, batch=batch, shape=shape)
    inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch), "cpu")
    ref = defn.run_reference(inputs)
    got = emulate(m, inputs["x"], inputs["weight"])
    res = compare(defn, {"out": got}, ref)
    assert res.ok, res.summary()
    # and a kernel that paired each gate with the wrong up (the next column's) would not pass
    i = inputs["weight"].shape[0] // 2
    w = inputs["weight"]
    shifted = torch.cat([w[:i], w[i:].roll(1, dims=0)])
    assert not compare(defn, {"out": emulate(m, inputs["x"], shifted)}, ref).ok


def test_shapes_are_the_gate_up_gemms():
    for tp in (8, 16):
        for s in SHAPE_NAMES:
            k, n2 = gemm_kn(s, tp)
            assert k == 7168 and n2 % 32 == 0


def _rendered_ids() -> list[str]:
    """The committed human candidates of the family (kernels_generated/gemm_situ_and_mul/)."""
    out = []
    for meta in sorted((ROOT / "kernels_generated/gemm_situ_and_mul").glob("*/candidate.json")):
        c = json.loads(meta.read_text())
        if (c["provenance"].get("template") or {}).get("family") == "swapab_situ":
            out.append(c["id"])
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cid", _rendered_ids())
def test_gpu_kernel_matches_the_reference(cid):
    """The compiled kernel at every scope shape and TP, B = 1, 3, 8 (the small kernel) and 9, 64 (the
    B <= 64 kernel, outside the declared scope but compiled), outputs poisoned with NaN first."""
    from harness.registry import device_arch
    from harness.toolchain import load_compiled

    defn = reference_impls.get("gemm_situ_and_mul")
    arch = device_arch(torch.device("cuda"))
    cdir = ROOT / "kernels_generated/gemm_situ_and_mul" / cid
    for tp in (8, 16):
        for shape in SHAPE_NAMES:
            fn = load_compiled(cdir, arch, tp, shape=shape)
            for batch in (1, 3, 8, 9, 64):
                pt = Point(tp=tp, batch=batch, shape=shape)
                inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch + tp), "cuda")
                outs = defn.alloc_outputs(pt, device="cuda", poison=True)
                fn(**inputs, **outs)
                torch.cuda.synchronize()
                res = compare(defn, outs, defn.run_reference(inputs))
                assert res.ok, f"{shape} TP{tp} B={batch}: {res.summary()}"
