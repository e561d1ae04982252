"""The CPU-testable parts of the timing library."""
import time

import pytest

from harness.toolchain.timing import (SEPARATOR, elapsed_us, graph_calls, interleave_order, rotation_copies,
                                     roofline_fraction, subtract_separator, summarize)


def test_interleave_is_abba_and_balanced():
    assert interleave_order(2, 1) == [0, 1, 1, 0]
    order = interleave_order(3, 4)
    assert order[:6] == [0, 1, 2, 2, 1, 0]
    # every implementation has the same mean position in time
    means = {i: sum(k for k, x in enumerate(order) if x == i) / order.count(i) for i in range(3)}
    assert len({round(m, 9) for m in means.values()}) == 1
    with pytest.raises(ValueError):
        interleave_order(0, 1)


def test_rotation_spans_l2():
    l2 = 60 * 2**20
    n = rotation_copies(13 * 2**20, l2)            # a router's weight + inputs
    assert n * 13 * 2**20 >= 3 * l2 and (n - 1) * 13 * 2**20 < 3 * l2
    assert rotation_copies(10 * 2**30, l2) == 2    # huge sets: still two (alternate buffers)
    assert rotation_copies(1024, l2) == 64         # tiny sets: capped
    with pytest.raises(ValueError):
        rotation_copies(0, l2)


def test_summary_statistics():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median_us, s.min_us, s.n_samples) == (3.0, 1.0, 5)
    assert s.p10_us == pytest.approx(1.4) and s.p90_us == pytest.approx(4.6)
    assert s.spread_pct == pytest.approx((4.6 - 1.4) / 3.0 * 100)


def test_roofline_fraction():
    # 3.6 MB at 3.6 TB/s is 1 us: a 2 us kernel runs at half the floor
    assert roofline_fraction(3_600_000, 3.6e12, 2.0) == pytest.approx(0.5)
    assert roofline_fraction(1, 1.0, 0.0) != roofline_fraction(1, 1.0, 0.0)   # NaN for no time


def test_the_separator_median_is_subtracted_from_every_sample():
    got = subtract_separator({SEPARATOR: [2.0, 9.0, 2.2, 1.8, 2.1], "a": [5.0, 5.5, 4.0], "b": [2.5]})
    assert set(got) == {"a", "b"}                               # the separator is not a result
    assert got["a"].median_us == pytest.approx(5.0 - 2.1) and got["a"].min_us == pytest.approx(4.0 - 2.1)
    assert got["b"].median_us == pytest.approx(2.5 - 2.1) and got["b"].n_samples == 1


def test_a_graph_uses_every_rotated_set():
    assert graph_calls(50, 64) == 64          # 50 calls would leave sets 50..63 unused
    assert graph_calls(100, 64) == 100        # the perf gate's 100 calls already cover 64 sets
    assert graph_calls(50, 2) == 50
    with pytest.raises(ValueError):
        graph_calls(0, 4)


def test_elapsed_us_without_cuda_is_the_host_time_of_one_call():
    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(0.02)
    us = elapsed_us(fn, cuda=False)
    assert calls == [1] and 20_000 <= us < 2_000_000
