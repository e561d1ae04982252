"""Registry dispatch: scope checks, fallback reasons, counters, kill switch, error fallback.

The "kernel" is a test-only Python callable (the contract of a compiled kernel: it writes
the output buffers it is given) that marks what it did, so the test sees which path ran.
"""
from __future__ import annotations

import json

import pytest
import torch

import reference_impls
from harness import registry as reg_mod
from harness.opdef import Point
from harness.registry import KernelScope, Outcome, Reason, Registry, TraceKey

OP = "moe_router"
DEFN = reference_impls.get(OP)
CPU_SCOPE = KernelScope(archs=("cpu",), tp=(8,), batch=(1, 4), dtypes=("bf16",))


def _inputs(batch: int, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(batch)
    inp = DEFN.make_inputs(Point(batch=batch), gen, "cpu")
    inp["x"] = inp["x"].to(dtype)
    return inp


class MarkingKernel:
    """Writes the reference answer into the outputs and weight 0.5 into slot 0 as a mark."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x, router_weight, e_score_bias, topk_weights, topk_ids) -> None:
        self.calls += 1
        ref = DEFN.reference(x, router_weight, e_score_bias)
        topk_weights.copy_(ref["topk_weights"])
        topk_weights[:, 0] = 0.5
        topk_ids.copy_(ref["topk_ids"])


def _key(outcome: Outcome, reason: Reason) -> TraceKey:
    return TraceKey(OP, outcome, reason)


def test_no_kernel_runs_reference_and_counts():
    reg = Registry()
    inp = _inputs(2)
    out = reg.run(OP, inp, tp=8)
    ref = DEFN.run_reference(inp)
    assert torch.equal(out["topk_ids"], ref["topk_ids"])
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.NO_KERNEL): 1}


def test_in_scope_dispatches_to_kernel():
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    out = reg.run(OP, _inputs(3), tp=8)
    assert k.calls == 1 and torch.all(out["topk_weights"][:, 0] == 0.5)
    assert reg.counters() == {_key(Outcome.KERNEL, Reason.IN_SCOPE): 1}


@pytest.mark.parametrize("case, reason", [
    ("batch", Reason.BATCH), ("tp", Reason.TP), ("dtype", Reason.DTYPE), ("arch", Reason.ARCH),
    ("shape", Reason.SHAPE)])
def test_out_of_scope_falls_back_with_reason(case, reason):
    reg, k = Registry(), MarkingKernel()
    scope = CPU_SCOPE
    inp, tp = _inputs(2), 8
    if case == "batch":
        inp = _inputs(8)
    elif case == "tp":
        tp = 16
    elif case == "dtype":
        inp = _inputs(2, torch.float16)
    elif case == "arch":
        scope = KernelScope(archs=("sm_90a",), tp=(8,), batch=(1, 4))
    elif case == "shape":
        inp["x"] = inp["x"][:, :1024].contiguous()
        inp["router_weight"] = inp["router_weight"][:, :1024].contiguous()
    reg.register(OP, scope, k)
    out = reg.run(OP, inp, tp=tp)
    assert k.calls == 0
    assert not torch.any(out["topk_weights"][:, 0] == 0.5)
    assert reg.counters() == {_key(Outcome.FALLBACK, reason): 1}


def test_kill_switch_env_and_api(monkeypatch):
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "rmsnorm,moe_router")
    reg.run(OP, _inputs(1), tp=8)
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "all")
    reg.run(OP, _inputs(1), tp=8)
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "rmsnorm")
    reg.run(OP, _inputs(1), tp=8)                        # another op off: this one runs
    monkeypatch.delenv(reg_mod.ENV_DISABLE)
    reg.disable(OP)
    reg.run(OP, _inputs(1), tp=8)
    with reg.disabled():
        reg.run(OP, _inputs(1), tp=8)
    reg.enable(OP)
    reg.run(OP, _inputs(1), tp=8)
    assert k.calls == 2
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.DISABLED): 4, _key(Outcome.KERNEL, Reason.IN_SCOPE): 2}


@pytest.mark.parametrize("env", ["moe_routr", "rmsnorm, moe_routr", "ALL"])
def test_an_env_kill_switch_naming_no_op_fails_closed_and_says_why(monkeypatch, env: str) -> None:
    """A typo must not leave the kernel it meant to switch off running: every kernel goes off and
    the registry's errors (what `harness trace` shows) name the bad entry."""
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    monkeypatch.setenv(reg_mod.ENV_DISABLE, env)
    reg.run(OP, _inputs(1), tp=8)
    assert k.calls == 0
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.DISABLED): 1}
    bad = [n.strip() for n in env.split(",") if n.strip() not in reference_impls.OP_NAMES]
    assert reg_mod.ENV_DISABLE in reg.errors() and all(b in reg.errors()[reg_mod.ENV_DISABLE] for b in bad)
    assert reg_mod.env_disable_problem() == reg.errors()[reg_mod.ENV_DISABLE]


def test_an_env_kill_switch_of_real_ops_reports_no_problem(monkeypatch) -> None:
    monkeypatch.setenv(reg_mod.ENV_DISABLE, " all , moe_router,")
    assert reg_mod.env_disable_problem() is None
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "rmsnorm")
    reg.run(OP, _inputs(1), tp=8)
    assert k.calls == 1 and reg.errors() == {}


def test_a_call_neither_reorders_the_entries_nor_reparses_the_kill_switch(monkeypatch) -> None:
    """The try order is computed when the entries change and the kill switch once per value of the
    variable, not on every dispatch (each decode step dispatches every op of every layer)."""
    sorts, parses = [], []
    real_sort, real_unknown = reg_mod.by_specificity, reg_mod._unknown_ops
    monkeypatch.setattr(reg_mod, "by_specificity", lambda es: sorts.append(1) or real_sort(es))
    monkeypatch.setattr(reg_mod, "_unknown_ops", lambda names: parses.append(1) or real_unknown(names))
    reg_mod._env_state.cache_clear()
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    reg.register(OP, KernelScope(archs=("cpu",), tp=(8,), batch=(1, 2), dtypes=("bf16",)), k, candidate="narrow")
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "rmsnorm")
    for _ in range(5):
        reg.run(OP, _inputs(1), tp=8)
    assert k.calls == 5 and len(sorts) == 2 and len(parses) == 1
    assert [e.candidate for e in reg.entries(OP)] == ["narrow", "direct"]
    reg.unregister(OP, "narrow")
    assert [e.candidate for e in reg.entries(OP)] == ["direct"]
    monkeypatch.setenv(reg_mod.ENV_DISABLE, "moe_router")             # a new value: parsed, and obeyed
    reg.run(OP, _inputs(1), tp=8)
    assert k.calls == 5 and len(parses) == 2


def test_shapes_are_worked_out_once_per_point_and_still_checked_on_every_call(monkeypatch) -> None:
    """The expected input shapes and the output buffers' shapes are worked out once per op and point
    (one ShapePlan), the tensors themselves checked against them on every call: a wrong shape after
    a right one at the same point still falls back."""
    from harness.opdef import OpDefinition

    shapes_calls, specs_calls = [], []
    real_shapes, real_specs = OpDefinition.shapes, reg_mod._output_specs
    monkeypatch.setattr(OpDefinition, "shapes", lambda self, p: shapes_calls.append(p) or real_shapes(self, p))
    monkeypatch.setattr(reg_mod, "_output_specs", lambda *a: specs_calls.append(1) or real_specs(*a))
    reg, k = Registry(), MarkingKernel()
    reg.register(OP, CPU_SCOPE, k)
    for _ in range(4):
        out = reg.run(OP, _inputs(2), tp=8)
        assert out["topk_weights"].shape == (2, 16) and out["topk_ids"].dtype == torch.int32
    assert k.calls == 4 and len(shapes_calls) == 2 and not specs_calls    # contexts 1 and 2, once
    bad = _inputs(2)
    bad["x"] = bad["x"][:, :1024].contiguous()
    bad["router_weight"] = bad["router_weight"][:, :1024].contiguous()
    reg.run(OP, bad, tp=8)
    short = _inputs(2)
    short["e_score_bias"] = short["e_score_bias"][None]                # one dim too many
    reg.run(OP, short, tp=8)
    out = reg.run(OP, _inputs(4), tp=8)                                # another point: worked out anew
    assert out["topk_weights"].shape == (4, 16)
    assert k.calls == 5 and len(shapes_calls) == 4 and len(reg._shapes) == 2
    assert reg.counters() == {_key(Outcome.KERNEL, Reason.IN_SCOPE): 5, _key(Outcome.FALLBACK, Reason.SHAPE): 2}


def _output_shapes_seen(defn, reg: Registry, contexts) -> list[dict[str, tuple[int, ...]]]:
    """The output buffers' shapes a kernel registered for `defn` at TP8 B=2 is handed, per context."""
    seen = []

    def kernel(**t):
        seen.append({n: tuple(v.shape) for n, v in t.items() if defn.spec(n).role.name == "OUTPUT"})
    reg.register(defn.name, KernelScope(archs=("cpu",), tp=(8,), batch=(1, 4), dtypes=("bf16",)), kernel)
    for ctx in contexts:
        inp = defn.make_inputs(Point(batch=2, context=ctx), torch.Generator().manual_seed(ctx), "cpu")
        reg.run(defn.name, inp, tp=8)
    return seen


def test_an_op_with_a_context_axis_gets_one_plan_and_its_outputs_fit_each_call() -> None:
    """mla_decode's inputs grow with the context, its outputs do not: one ShapePlan serves every
    context (the memo does not grow by an entry a decode step), and every call's buffers fit."""
    defn, reg = reference_impls.get("mla_decode"), Registry()
    seen = _output_shapes_seen(defn, reg, (100, 101, 4096))
    want = [{n: s for n, s in defn.shapes(Point(batch=2, context=c)).items() if n in seen[0]} for c in (100, 101, 4096)]
    assert seen == want and len(reg._shapes) == 1
    assert reg.counters() == {TraceKey("mla_decode", Outcome.KERNEL, Reason.IN_SCOPE): 3}


def test_an_output_that_follows_the_context_is_sized_per_call(monkeypatch) -> None:
    """No op of the catalogue has one, but an output whose shape follows the context is sized from
    each call's tensors, not from the plan's context-1 point."""
    import dataclasses

    from harness.opdef import Role, TensorSpec

    base = reference_impls.get("mla_decode")
    grown = dataclasses.replace(base, outputs=base.outputs + (TensorSpec("probs", ("B", "L"), "fp32", Role.OUTPUT),))
    monkeypatch.setattr(reference_impls, "get", lambda op: grown if op == "mla_decode" else base)
    seen = _output_shapes_seen(grown, Registry(), (100, 101))
    assert [s["probs"] for s in seen] == [(2, 100), (2, 101)]
    assert [s["lat"] for s in seen] == [grown.shapes(Point(batch=2, context=100))["lat"]] * 2


def test_disable_refuses_a_name_that_is_no_op() -> None:
    reg = Registry()
    with pytest.raises(ValueError, match="moe_routr"):
        reg.disable("moe_routr")
    assert not reg.is_disabled(OP)


def test_raising_kernel_falls_back_with_error():
    reg = Registry()

    def broken(**tensors):
        raise RuntimeError("illegal memory access")

    reg.register(OP, CPU_SCOPE, broken)
    inp = _inputs(2)
    out = reg.run(OP, inp, tp=8, site="layer3.router")
    assert torch.equal(out["topk_ids"], DEFN.run_reference(inp)["topk_ids"])
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.ERROR): 1}
    assert "illegal memory access" in reg.errors()[OP] and "layer3.router" in reg.errors()[OP]


def test_manifest_loads_candidates_through_injected_loader(tmp_path):
    seen = []
    k = MarkingKernel()

    def loader(candidate_dir, arch, tp, **static):
        seen.append((candidate_dir.name, arch, tp))
        if candidate_dir.name == "bad":
            raise RuntimeError("compile failed")
        return k

    scope = {"archs": ["cpu"], "tp": [8], "batch": [1, 64], "dtypes": ["bf16"]}
    manifest = tmp_path / "promoted.json"
    manifest.write_text(json.dumps([{"op": OP, "candidate": "abc123", "scope": scope}]))
    reg = Registry(loader=loader)
    assert reg.load_manifest(manifest) == 1
    reg.run(OP, _inputs(1), tp=8)
    reg.run(OP, _inputs(2), tp=8)
    assert seen == [("abc123", "cpu", 8)] and k.calls == 2          # compiled once, cached

    manifest.write_text(json.dumps([{"op": OP, "candidate": "bad", "scope": scope}]))
    reg = Registry(loader=loader)
    reg.load_manifest(manifest)
    reg.run(OP, _inputs(1), tp=8)
    reg.run(OP, _inputs(1), tp=8)
    assert [s[0] for s in seen].count("bad") == 1                   # a failed compile is not retried
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.ERROR): 2}


def test_missing_toolchain_is_an_error_fallback_not_a_crash(tmp_path):
    reg = Registry(loader=lambda *a, **kw: (_ for _ in ()).throw(ModuleNotFoundError("harness.toolchain")))
    reg.register(OP, CPU_SCOPE, candidate="x", candidate_dir=tmp_path)
    reg.run(OP, _inputs(1), tp=8)
    assert reg.counters() == {_key(Outcome.FALLBACK, Reason.ERROR): 1}


def test_counter_rows_round_trip():
    counts = {_key(Outcome.KERNEL, Reason.IN_SCOPE): 3, _key(Outcome.FALLBACK, Reason.BATCH): 1}
    assert reg_mod.rows_to_counters(json.loads(json.dumps(reg_mod.counter_rows(counts)))) == counts


def test_the_state_dtype_is_read_off_the_state_and_routes_the_call() -> None:
    """kda_decode holds fp32 or bf16 state: the call's state dtype is its `state` tensor's, a kernel
    scoped to bf16 state runs only on those calls (the others fall back with reason dtype), and the
    state comes back with the outputs."""
    defn, reg, calls = reference_impls.get("kda_decode"), Registry(), []
    reg.register("kda_decode", KernelScope(archs=("cpu",), tp=(8,), batch=(1, 4), dtypes=("bf16",),
                                           state_dtypes=("bf16",)), lambda **t: calls.append(t["state"].dtype))
    inputs = {sd: defn.make_inputs(Point(batch=2, state_dtype=sd), torch.Generator().manual_seed(0), "cpu")
              for sd in ("bf16", "fp32")}
    out = reg.run("kda_decode", inputs["bf16"], tp=8)
    reg.run("kda_decode", inputs["fp32"], tp=8)
    assert calls == [torch.bfloat16] and out["state"] is inputs["bf16"]["state"]
    assert reg.counters() == {TraceKey("kda_decode", Outcome.KERNEL, Reason.IN_SCOPE): 1,
                              TraceKey("kda_decode", Outcome.FALLBACK, Reason.DTYPE): 1}
