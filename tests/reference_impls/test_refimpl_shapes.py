"""Shapes and dtypes of every op at B=1 and B=64 for TP8 and TP16 (through shapes()), and
the reference run on seeded inputs for the ops cheap enough on a CPU."""
from __future__ import annotations

import pytest
import torch

import reference_impls
from harness.opdef import DTYPES, Point, Role, check_point
from reference_impls._common import spec_dtype

# ops whose full-size reference is cheap on 2 CPU cores at B=64 (moe_experts would draw
# all 896 experts, ~1 GB; mla runs at a small context here)
RUN_REFERENCE = ("kda_decode", "mla_decode", "attn_res", "add_rmsnorm", "rmsnorm", "situ_and_mul",
                 "silu_and_mul", "skinny_gemm", "oproj_allreduce_residual", "moe_router")

EXPECTED_MAIN = {   # (op, tp) -> the doc's per-rank shape of one tensor, at B=1
    ("kda_decode", 8): ("state", (1, 12, 128, 128)),
    ("kda_decode", 16): ("state", (1, 6, 128, 128)),
    ("mla_decode", 8): ("q_lat", (1, 12, 512)),
    ("oproj_allreduce_residual", 16): ("w_o", (7168, 768)),
    ("situ_and_mul", 8): ("out", (1, 768)),
    ("moe_experts", 8): ("w13", (896, 768, 1792)),
    ("moe_experts", 16): ("w2_scale", (896, 3584, 6)),
    ("skinny_gemm", 8): ("weight", (3584, 7168)),
    ("attn_res", 16): ("blocks", (1, 8, 7168)),
}


def _point(defn, batch: int, tp: int, state_dtype: str = "fp32", shape: str = "") -> Point:
    return Point(batch=batch, tp=tp, context=48 if defn.uses_context else 0, state_dtype=state_dtype, shape=shape)


def test_catalogue_complete() -> None:
    assert [d.name for d in reference_impls.all_ops()] == list(reference_impls.OP_NAMES)
    with pytest.raises(ValueError, match="unknown op"):
        reference_impls.get("nope")


@pytest.mark.parametrize("op", reference_impls.OP_NAMES)
@pytest.mark.parametrize("tp", [8, 16])
@pytest.mark.parametrize("batch", [1, 64])
def test_shapes(op: str, tp: int, batch: int) -> None:
    defn = reference_impls.get(op)
    pt = _point(defn, batch, tp)
    check_point(defn, pt)
    shapes = defn.shapes(pt)
    assert set(shapes) == set(defn.tensor_names)
    for name, shape in shapes.items():
        assert all(isinstance(s, int) and s >= 1 for s in shape), (name, shape)
        if "B" in defn.spec(name).shape:
            assert shape[defn.spec(name).shape.index("B")] == batch
    assert set(defn.tolerances) == {t.name for t in defn.outputs}
    assert defn.min_bytes(pt) > 0 and defn.flops(pt) > 0
    if (op, tp) in EXPECTED_MAIN and batch == 1:
        name, want = EXPECTED_MAIN[(op, tp)]
        assert shapes[name] == want
    for t in defn.inputs + defn.outputs:
        if t.role is Role.STATE:                  # state outputs alias an input of the same spec
            assert any(i.name == t.name and i.shape == t.shape for i in defn.inputs)


@pytest.mark.parametrize("op", RUN_REFERENCE)
@pytest.mark.parametrize("tp", [8, 16])
@pytest.mark.parametrize("batch", [1, 64])
def test_reference_shapes_and_dtypes(op: str, tp: int, batch: int) -> None:
    defn = reference_impls.get(op)
    if (op, tp, batch) in ((("kda_decode", 8, 64), ("mla_decode", 8, 64))):
        pytest.skip("same code path as TP16 at B=64 (fewer heads); its shapes are checked by test_shapes")
    # the default GEMM (7168x3584) costs seconds on 2 cores; every shape is checked by test_shapes
    shape = "kda_f_b" if op == "skinny_gemm" else ""
    for sd in defn.state_dtypes:
        pt = _point(defn, batch, tp, sd, shape)
        inputs = defn.make_inputs(pt, torch.Generator().manual_seed(batch + tp), "cpu")
        outputs = defn.run_reference(inputs)
        shapes = defn.shapes(pt)
        names = defn.extra.get("state_dtype_tensors", ())
        assert set(inputs) == {t.name for t in defn.inputs}
        assert set(outputs) == {t.name for t in defn.outputs}
        for group, specs in ((inputs, defn.inputs), (outputs, defn.outputs)):
            for spec in specs:
                assert tuple(group[spec.name].shape) == shapes[spec.name], spec.name
                assert group[spec.name].dtype == spec_dtype(spec, pt, names), spec.name
                if group[spec.name].dtype.is_floating_point:
                    assert torch.isfinite(group[spec.name].float()).all(), spec.name
        for name, buf in defn.alloc_outputs(pt).items():
            assert tuple(buf.shape) == shapes[name] and buf.dtype == DTYPES[defn.spec(name).dtype]


def test_inputs_are_seeded() -> None:
    defn = reference_impls.get("kda_decode")
    a = defn.make_inputs(Point(2, 16), torch.Generator().manual_seed(7), "cpu")
    b = defn.make_inputs(Point(2, 16), torch.Generator().manual_seed(7), "cpu")
    c = defn.make_inputs(Point(2, 16), torch.Generator().manual_seed(8), "cpu")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["qkv"], c["qkv"])


def test_skinny_gemm_every_shape() -> None:
    from reference_impls.skinny_gemm import SHAPES

    defn = reference_impls.get("skinny_gemm")
    assert set(SHAPES) == {8, 16} and len(SHAPES[8]) == 13
    for tp, table in SHAPES.items():
        for name, (k, n) in table.items():
            s = defn.shapes(Point(64, tp, shape=name))
            assert s["weight"] == (n, k) and s["x"] == (64, k) and s["out"] == (64, n)
    # the doc's table: in_proj rows padded to 16 (6288 / 3216), q_b = h*192
    assert SHAPES[8]["kda_in_proj"] == (7168, 6288) and SHAPES[16]["kda_in_proj"] == (7168, 3216)
    assert SHAPES[8]["mla_q_b"] == (1536, 2304) and SHAPES[16]["shared_down"] == (384, 7168)
    with pytest.raises(ValueError, match="unknown GEMM shape"):
        defn.shapes(Point(1, 8, shape="nope"))


@pytest.mark.parametrize("op,batch,mb", [
    ("kda_decode", 1, 1.7), ("kda_decode", 64, 106), ("attn_res", 64, 11), ("oproj_allreduce_residual", 1, 22),
    ("moe_router", 1, 12.9), ("moe_experts", 1, 35), ("moe_experts", 64, 1353),
])
def test_min_bytes_near_doc_table(op: str, batch: int, mb: float) -> None:
    """TP8 bytes within 5% of docs/kimi_k3_decode_ops.md's bytes column (uniform routing)."""
    defn = reference_impls.get(op)
    got = defn.min_bytes(Point(batch, 8)) / 1e6
    assert abs(got - mb) / mb < 0.05, got
