"""The fused gate_up GEMM + SiTU (gemm_situ_and_mul) on the decode path: the decoder calls it only
where the registry would run its kernel (Registry.selects_kernel) and otherwise runs the pair it
replaces (skinny_gemm, situ_and_mul), so their kernels keep running; turning it off (disable, the
kill switch) brings the pair back; a fused kernel that computes the pair's math decodes the same
logits bit for bit."""
from __future__ import annotations

from pathlib import Path

import torch

import reference_impls
from harness.model import DecodeCache, K3Decoder, get_config
from harness.registry import KernelScope, Outcome, Reason, Registry, TraceKey

CFG = get_config("tiny")
PROMPTS = [[257, 72, 101, 108], [257, 123, 34]]
FUSED = reference_impls.get("gemm_situ_and_mul")
SCOPE = KernelScope(archs=("cpu",), tp=(CFG.tp,), batch=(1, 64), dtypes=("bf16",),
                    shapes=("shared_gate_up", "dense_gate_up"))


def _fused_kernel(calls: list[tuple[int, int]]):
    """A kernel fn (writes `out` in place) computing the op's reference, recording (B, 2I)."""
    def fn(x, weight, out):
        calls.append((int(x.shape[0]), int(weight.shape[0])))
        out.copy_(FUSED.reference(x, weight)["out"])
    return fn


def _decode(weights, reg: Registry, steps: int = 2) -> torch.Tensor:
    model = K3Decoder(CFG, weights, reg)
    cache = DecodeCache.allocate(CFG, len(PROMPTS), max(map(len, PROMPTS)) + steps + 1)
    logits = model.prefill(PROMPTS, cache)
    out = [logits]
    for _ in range(steps):
        logits = model.step(logits.argmax(-1), cache)
        out.append(logits)
    return torch.stack(out)


def _ffn_layers() -> int:
    return CFG.n_layers                  # every layer has one FFN: the dense one (layer 1) or a MoE's shared experts


def test_the_fused_op_replaces_the_pair_where_its_kernel_runs(tiny_weights):
    plain = Registry(check_shapes=False)
    want = _decode(tiny_weights, plain)
    calls: list[tuple[int, int]] = []
    reg = Registry(check_shapes=False)
    reg.register("gemm_situ_and_mul", SCOPE, fn=_fused_kernel(calls))
    got = _decode(tiny_weights, reg)
    assert torch.equal(got, want)                           # the same math, the same logits
    steps = sum(len(p) for p in PROMPTS) // len(PROMPTS)     # prefill runs a decode step per prompt position
    c = reg.counters()
    assert c[TraceKey("gemm_situ_and_mul", Outcome.KERNEL, Reason.IN_SCOPE)] == len(calls) > 0
    assert len(calls) >= _ffn_layers() * steps
    assert not any(k.op == "situ_and_mul" for k in c)        # no SiTU left outside the fused op
    skinny = sum(n for k, n in c.items() if k.op == "skinny_gemm")
    assert skinny == sum(n for k, n in plain.counters().items() if k.op == "skinny_gemm") - len(calls)


def test_disabled_or_out_of_scope_the_pair_runs(tiny_weights):
    calls: list[tuple[int, int]] = []
    reg = Registry(check_shapes=False)
    reg.register("gemm_situ_and_mul", SCOPE, fn=_fused_kernel(calls))
    reg.disable("gemm_situ_and_mul")
    _decode(tiny_weights, reg, steps=1)
    assert not calls and not any(k.op == "gemm_situ_and_mul" for k in reg.counters())
    assert any(k.op == "situ_and_mul" for k in reg.counters())

    only_dense = Registry(check_shapes=False)                # scope: the dense FFN only
    only_dense.register("gemm_situ_and_mul", KernelScope(archs=("cpu",), tp=(CFG.tp,), batch=(1, 64),
                                                         dtypes=("bf16",), shapes=("dense_gate_up",)),
                        fn=_fused_kernel(calls))
    _decode(tiny_weights, only_dense, steps=1)
    n_dense = sum(1 for i in range(CFG.n_layers) if CFG.is_dense(i))
    assert calls and all(two_i == calls[0][1] for _, two_i in calls)   # one GEMM shape: the dense one
    c = only_dense.counters()
    assert c[TraceKey("situ_and_mul", Outcome.FALLBACK, Reason.NO_KERNEL)] == \
        (CFG.n_layers - n_dense) * len(calls) // n_dense               # the shared experts kept the pair


def test_selects_kernel_runs_nothing_and_counts_nothing():
    reg = Registry(check_shapes=False)
    x = torch.zeros(2, 16, dtype=torch.bfloat16)
    w = torch.zeros(8, 16, dtype=torch.bfloat16)
    inputs = {"x": x, "weight": w}
    assert not reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")   # none registered
    calls: list = []
    reg.register("gemm_situ_and_mul", SCOPE, fn=_fused_kernel(calls))
    assert reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")
    assert not reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="latent_down")    # not its shape
    assert not reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp + 1, shape="shared_gate_up")
    with reg.disabled("gemm_situ_and_mul"):
        assert not reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")
    assert not calls and reg.counters() == {}


def test_selects_kernel_is_false_after_a_failed_compile():
    def broken_loader(*args, **kwargs):
        raise RuntimeError("compile failed")

    reg = Registry(loader=broken_loader, check_shapes=False)
    reg.register("gemm_situ_and_mul", SCOPE, candidate="x", candidate_dir=Path("/nonexistent/candidate"))
    inputs = {"x": torch.zeros(2, 16, dtype=torch.bfloat16), "weight": torch.zeros(8, 16, dtype=torch.bfloat16)}
    assert reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")
    reg.run("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")        # the compile fails once
    assert TraceKey("gemm_situ_and_mul", Outcome.FALLBACK, Reason.ERROR) in reg.counters()
    assert not reg.selects_kernel("gemm_situ_and_mul", inputs, tp=CFG.tp, shape="shared_gate_up")
