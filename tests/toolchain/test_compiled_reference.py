"""gpu_eval.compiled_reference: torch.compile of a reference writing into given buffers, with
dynamo's recompile limit raised (CPU: the mechanics are the same as on the GPU)."""
from __future__ import annotations

import pytest
import torch

import reference_impls
from harness.opdef import Point, Role
from harness.toolchain.gpu_eval import RECOMPILE_LIMIT, compiled_reference


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def test_static_shapes_past_dynamos_default_limit_stay_compiled():
    """dynamic=False is one graph per shape; dynamo's default limit (8) would run the 9th shape
    eagerly without a word. Ten batches: ten graphs, every output the reference's."""
    defn = reference_impls.get("situ_and_mul")
    fn = compiled_reference(defn, dynamic=False, backend="eager")
    assert torch._dynamo.config.recompile_limit >= RECOMPILE_LIMIT
    for b in range(1, 11):
        pt = Point(batch=b, tp=8)
        x = defn.make_inputs(pt, torch.Generator().manual_seed(b))
        outs = defn.alloc_outputs(pt, poison=True)
        assert fn(x, outs) is None
        assert torch.equal(outs["out"], defn.reference(**x)["out"])
    assert _unique_graphs() == 10


@pytest.mark.parametrize("op", reference_impls.OP_NAMES)
def test_every_output_lands_in_the_kernels_buffers(op):
    """Every op's reference outputs are either destination buffers (alloc_outputs) or state
    outputs, written into their input in place (kda's state and conv_state), as the kernels do."""
    defn = reference_impls.get(op)
    pt = Point(batch=1, tp=16, state_dtype=defn.state_dtypes[0] if defn.state_dtypes else "")
    x = defn.make_inputs(pt, torch.Generator().manual_seed(0))
    want = defn.reference(**{k: v.clone() for k, v in x.items()})
    before = {k: v.clone() for k, v in x.items()}
    outs = defn.alloc_outputs(pt, poison=True)
    compiled_reference(defn, dynamic=False, backend="eager")(x, outs)
    state = {t.name for t in defn.outputs if t.role is Role.STATE}
    for name, value in want.items():
        got = x[name] if name in state else outs[name]
        assert torch.equal(got, value), name
    for name in set(x) - state:                      # nothing else of the inputs changed
        assert torch.equal(x[name], before[name]), name
    if op == "kda_decode":
        assert state == {"state", "conv_state"} and set(outs) == {"o"}
        assert not torch.equal(x["state"], before["state"])


def test_inductor_writes_the_given_buffer():
    """The real backend (C++ on the CPU, triton on the GPU): the result lands in `outs`."""
    defn = reference_impls.get("add_rmsnorm")
    pt = Point(batch=2, tp=8)
    x = defn.make_inputs(pt, torch.Generator().manual_seed(3))
    outs = defn.alloc_outputs(pt, poison=True)
    compiled_reference(defn)(x, outs)
    want = defn.reference(**x)
    for name, buf in outs.items():
        torch.testing.assert_close(buf.float(), want[name].float(), rtol=2e-2, atol=2e-2)
