"""scripts/gpu/profile_kernels.py: the device-timeline tails (pure; the GPU part is a script)."""
from __future__ import annotations


import pytest
from gpu_scripts import gpu_script


@pytest.fixture(scope="module")
def pk():
    return gpu_script("profile_kernels")


def test_pdl_kernel_is_charged_only_past_its_predecessor(pk):
    # two calls of (gemm, topk): topk launched early (PDL) and ends 3 us, then 2 us, after the gemm
    spans = [(0.0, 5.0, "gemm"), (1.0, 8.0, "topk"), (10.0, 15.0, "gemm"), (11.0, 17.0, "topk")]
    t = pk.timeline_tails(spans)
    assert t["topk"] == {"tail_us": 2.5, "gap_us": -4.0}
    assert t["gemm"] == {"tail_us": 7.0, "gap_us": 2.0}        # from the last end: includes the 2 us gap
    # per call, the tails add up to the stream's time (first kernel excluded)
    assert t["topk"]["tail_us"] * 2 + t["gemm"]["tail_us"] == pytest.approx(17.0 - 5.0)


def test_a_kernel_hidden_under_a_longer_one_costs_nothing(pk):
    spans = [(3.0, 4.0, "small"), (0.0, 10.0, "long"), (11.0, 12.0, "next")]   # unsorted input
    t = pk.timeline_tails(spans)
    assert t["small"]["tail_us"] == 0.0 and t["small"]["gap_us"] == -7.0
    assert t["next"] == {"tail_us": 2.0, "gap_us": 7.0}                       # after 'small' ended at 4
    assert pk.timeline_tails([]) == {}
