"""Several kernels for one op: a narrow kernel beside a broad one, the most specific entry
covering a call runs it, and the trace names which one ran.

The kernels are test-only callables that write the reference answer plus a mark of their
own (slot 0's weight), so each test sees which entry served a call.
"""
from __future__ import annotations

import pytest
import torch

import reference_impls
from harness.opdef import Point
from harness.registry import KernelEntry, KernelScope, Outcome, Reason, Registry, TraceKey, by_specificity

OP = "moe_router"
DEFN = reference_impls.get(OP)
BROAD = KernelScope(archs=("cpu",), tp=(8,), batch=(1, 4), dtypes=("bf16",))
NARROW = KernelScope(archs=("cpu",), tp=(8,), batch=(1, 2), dtypes=("bf16",))


def _inputs(batch: int):
    inp = DEFN.make_inputs(Point(batch=batch), torch.Generator().manual_seed(batch), "cpu")
    inp["x"] = inp["x"].to(torch.bfloat16)
    return inp


class Marked:
    """Writes the reference answer and `mark` into slot 0's weight."""

    def __init__(self, mark: float) -> None:
        self.mark, self.calls = mark, 0

    def __call__(self, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
        self.calls += 1
        ref = DEFN.reference(x, router_weight, e_score_bias)
        topk_weights.copy_(ref["topk_weights"])
        topk_weights[:, 0] = self.mark
        topk_ids.copy_(ref["topk_ids"])


def _mark(out) -> float:
    return float(out["topk_weights"][0, 0])


@pytest.fixture(scope="module")
def inputs():
    return {b: _inputs(b) for b in (1, 2, 3, 8)}


@pytest.mark.parametrize("order", ["broad first", "narrow first"])
def test_the_narrow_kernel_runs_inside_its_scope_and_the_broad_one_elsewhere(order, inputs):
    reg, broad, narrow = Registry(), Marked(0.25), Marked(0.75)
    regs = [(BROAD, broad, "b0ad"), (NARROW, narrow, "0a11")]
    for scope, fn, cid in (regs if order == "broad first" else regs[::-1]):
        reg.register(OP, scope, fn, candidate=cid)
    assert _mark(reg.run(OP, inputs[1], tp=8)) == 0.75
    assert _mark(reg.run(OP, inputs[2], tp=8)) == 0.75
    assert _mark(reg.run(OP, inputs[3], tp=8)) == 0.25
    out = reg.run(OP, inputs[8], tp=8)                        # outside both: the reference
    assert torch.equal(out["topk_ids"], DEFN.run_reference(inputs[8])["topk_ids"]) and _mark(out) != 0.25
    assert (narrow.calls, broad.calls) == (2, 1)
    assert reg.candidate_counters() == {(OP, "0a11"): 2, (OP, "b0ad"): 1}
    assert reg.counters() == {TraceKey(OP, Outcome.KERNEL, Reason.IN_SCOPE): 3,
                              TraceKey(OP, Outcome.FALLBACK, Reason.BATCH): 1}
    assert [e.candidate for e in reg.entries(OP)] == ["0a11", "b0ad"]


def test_same_scope_or_same_candidate_replaces_the_entry(inputs):
    reg, old, new = Registry(), Marked(0.25), Marked(0.75)
    reg.register(OP, BROAD, old, candidate="old")
    reg.register(OP, BROAD, new, candidate="new")             # same scope: a replacement
    assert [e.candidate for e in reg.entries(OP)] == ["new"]
    reg.register(OP, NARROW, old, candidate="new")            # same candidate, new scope: moved
    assert [(e.candidate, e.scope) for e in reg.entries(OP)] == [("new", NARROW)]
    assert _mark(reg.run(OP, inputs[3], tp=8)) != 0.25 and old.calls == 0


def test_unregister_one_candidate_or_all(inputs):
    reg = Registry()
    reg.register(OP, BROAD, Marked(0.25), candidate="b")
    reg.register(OP, NARROW, Marked(0.75), candidate="n")
    reg.unregister(OP, "n")
    assert _mark(reg.run(OP, inputs[1], tp=8)) == 0.25
    reg.unregister(OP, "missing")                             # nothing to remove: a no-op
    assert [e.candidate for e in reg.entries()] == ["b"]
    reg.unregister(OP)
    assert reg.entries() == []
    reg.reset_counters()
    assert reg.candidate_counters() == {}
    reg.run(OP, inputs[1], tp=8)
    assert reg.counters() == {TraceKey(OP, Outcome.FALLBACK, Reason.NO_KERNEL): 1}


def test_kill_switch_turns_every_entry_of_the_op_off(inputs):
    reg, broad, narrow = Registry(), Marked(0.25), Marked(0.75)
    reg.register(OP, BROAD, broad, candidate="b")
    reg.register(OP, NARROW, narrow, candidate="n")
    with reg.disabled(OP):
        reg.run(OP, inputs[1], tp=8)
        reg.run(OP, inputs[3], tp=8)
    assert broad.calls == narrow.calls == 0
    assert reg.counters() == {TraceKey(OP, Outcome.FALLBACK, Reason.DISABLED): 2}


def test_a_failing_narrow_kernel_falls_back_to_the_reference_with_its_error(inputs):
    def broken(**_):
        raise RuntimeError("boom")
    reg, broad = Registry(), Marked(0.25)
    reg.register(OP, BROAD, broad, candidate="b")
    reg.register(OP, NARROW, broken, candidate="n")
    out = reg.run(OP, inputs[1], tp=8)
    assert torch.equal(out["topk_ids"], DEFN.run_reference(inputs[1])["topk_ids"]) and broad.calls == 0
    assert "boom" in reg.errors()[OP]
    assert reg.counters() == {TraceKey(OP, Outcome.FALLBACK, Reason.ERROR): 1}


def test_scope_size_covers_and_admits():
    shapes = KernelScope(archs=("sm_90a",), tp=(8, 16), batch=(1, 8), shapes=("latent_up", "mla_qkv_a"))
    one = KernelScope(archs=("sm_90a",), tp=(8, 16), batch=(1, 8), shapes=("mla_qkv_a",))
    anyshape = KernelScope(archs=("sm_90a",), tp=(8, 16), batch=(1, 8))
    assert shapes.covers(one) and not one.covers(shapes)
    assert anyshape.covers(shapes) and not shapes.covers(anyshape)       # empty = any
    assert shapes.covers(shapes)
    assert one.size() < shapes.size() < anyshape.size()
    assert one.size() == 8 * 1 * 2 * 1 * 1024 * 1      # batches, archs, tp, dtypes (bf16), any state dtype, shapes
    assert not KernelScope(archs=(), tp=(), batch=(1, 4)).covers(KernelScope(archs=(), tp=(), batch=(2, 8)))
    assert one.admits("sm_90a", 16, 8, "bf16", "", "mla_qkv_a") is None
    assert one.admits("sm_90a", 16, 8, "bf16", "", "latent_up") is Reason.SHAPE
    assert one.admits("sm_90a", 16, 9, "bf16", "", "mla_qkv_a") is Reason.BATCH
    assert one.admits("sm_103a", 16, 8, "bf16", "", "mla_qkv_a") is Reason.ARCH
    assert one.admits("sm_90a", 4, 8, "bf16", "", "mla_qkv_a") is Reason.TP
    assert KernelScope(archs=(), tp=(), batch=(1, 8), dtypes=("bf16",)).admits("cpu", 8, 1, "fp16", "", "") is Reason.DTYPE


def test_by_specificity_smallest_first_then_latest_registered():
    a, b, c = (KernelEntry(OP, n, s, fn=lambda **_: None) for n, s in (("a", BROAD), ("b", NARROW), ("c", BROAD)))
    assert [e.candidate for e in by_specificity([a, b, c])] == ["b", "c", "a"]
