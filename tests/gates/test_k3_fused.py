"""The model gate's pair for an op that a fused op replaces where the fused kernel runs
(gemm_situ_and_mul over skinny_gemm + situ_and_mul): the fused kernel is off on every path,
so the gated op's own calls run at the gate's batch."""
from __future__ import annotations

import pytest

from gates import _k3
from harness import paths
from harness.model.sampling import SamplingParams
from harness.registry import KernelScope

from gate_repo_helpers import reference_kernel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _any_scope() -> KernelScope:
    return KernelScope(archs=(), tp=(), batch=(1, 1 << 30), dtypes=())


def test_fused_over_reads_the_definitions_replaces():
    assert _k3.fused_over("situ_and_mul") == ("gemm_situ_and_mul",)
    assert _k3.fused_over("skinny_gemm") == ("gemm_situ_and_mul",)
    assert _k3.fused_over("moe_router") == () and _k3.fused_over("gemm_situ_and_mul") == ()


def test_situ_and_mul_pair_runs_with_the_fused_kernel_off_on_every_path():
    pair = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cpu", noise=True,
                          on_fn=reference_kernel("situ_and_mul"))
    assert pair.fused_off == ("gemm_situ_and_mul",)
    for reg in (pair.reg_on, pair.reg_off, pair.reg_noise):
        assert reg.is_disabled("gemm_situ_and_mul")
    assert not pair.reg_on.is_disabled("situ_and_mul") and pair.reg_off.is_disabled("situ_and_mul")
    # a fused kernel registered on the on path would shadow every situ_and_mul call; off, it does not
    pair.reg_on.register("gemm_situ_and_mul", _any_scope(), reference_kernel("gemm_situ_and_mul"), candidate="test-fused")
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 1, 2), 2, SamplingParams())
    assert r["kernel_calls_on"] > 0
    pair.reg_on.enable("gemm_situ_and_mul")                     # the old pair: the fused kernel on
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 1, 2), 2, SamplingParams())
    assert r["kernel_calls_on"] == 0


def test_an_op_nothing_replaces_keeps_every_promoted_kernel():
    pair = _k3.build_pair("moe_router", None, paths.root(), "tiny", 0, "cpu", on_fn=reference_kernel("moe_router"))
    assert pair.fused_off == ()
    assert not pair.reg_on.is_disabled("gemm_situ_and_mul")


def test_the_pair_counts_the_candidates_own_calls_not_a_narrower_kernel_of_its_op():
    """With a narrower kernel of the op on the on path (a promoted one the candidate would not
    replace), the calls it serves are not the candidate's: the gates count the candidate's."""
    pair = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cpu", on_fn=reference_kernel("situ_and_mul"))
    assert pair.candidate == "test-fn"
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 1, 2), 2, SamplingParams())
    assert r["kernel_calls_on"] > 0 and r["trace"]["on_by_candidate"] == {"test-fn": r["kernel_calls_on"]}
    cpu_only = KernelScope(archs=("cpu",), tp=(), batch=(1, 1 << 30), dtypes=())
    pair.reg_on.register("situ_and_mul", cpu_only, reference_kernel("situ_and_mul"), candidate="narrower")
    r = _k3.lockstep(pair, _k3.prompts(pair.tokenizer, 1, 2), 2, SamplingParams())
    assert r["kernel_calls_on"] == 0 and r["trace"]["on_by_candidate"]["narrower"] > 0
