"""GPU timing per docs/fast_track_gates.md section 4.

- CUDA-graph replay of many calls (launch overhead amortised the way the decode path sees it);
- inputs and weights rotated through enough copies that the rotation exceeds L2 by a factor
  (60 MB on H200), so no call is served from cache;
- warm-up before capture; the median of repeated replays and the spread (p10..p90);
- a separator between calls: a one-element torch kernel (no programmatic-dependent-launch
  trigger) precedes every call in the graph and its own time, measured alone in the same
  interleaving, is subtracted. Without it a kernel launched with PDL overlaps the previous
  call of itself (its weight loads run during that call's tail), which no decode step does:
  on the H200 a router whose GEMM prefetches weights measured 1.37x faster back to back but
  1.03x faster after the real kernel before it (results/h200/session5/);
- several implementations measured interleaved in one process on one GPU, in the order
  A B B A (ABC CBA for three), so that drift (clocks, temperature) hits all alike;
- the roofline fraction from the op's byte formula over a bandwidth measured on the same
  GPU in the same run (a device-to-device copy).

The pure parts (statistics, rotation sizing, interleave order) run on the CPU; everything
that touches torch.cuda is imported and called only on a GPU machine.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

L2_ROTATION_FACTOR = 3.0     # rotated bytes >= 3 x L2: each call's data was evicted since its last use
MAX_COPIES = 64
# The copy whose bandwidth the floors divide by. A copy pays a fixed ~14 us (launch, ramp, tail)
# on top of its bytes, so a small one reads low: on the H200 128 MiB read 3.58 TB/s, 512 MiB 4.03,
# 2 GiB 4.20 (session 31's bandwidth_probe); 4 GiB sits within ~1% of the asymptote, so a floor
# over it is a true lower bound rather than a ~4% lenient one.
COPY_BENCH_BYTES = 4 * 2**30


@dataclass(frozen=True)
class TimingStats:
    median_us: float
    p10_us: float
    p90_us: float
    min_us: float
    spread_pct: float            # (p90 - p10) / median * 100
    n_samples: int

    def as_dict(self) -> dict[str, float]:
        return {"median_us": self.median_us, "p10_us": self.p10_us, "p90_us": self.p90_us,
                "min_us": self.min_us, "spread_pct": self.spread_pct, "n_samples": self.n_samples}


def _quantile(sorted_vals: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values."""
    if not sorted_vals:
        raise ValueError("no samples")
    pos = (len(sorted_vals) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def summarize(samples_us: Sequence[float]) -> TimingStats:
    """Median, p10, p90, min and relative spread of per-call times (us)."""
    s = sorted(float(x) for x in samples_us)
    med = statistics.median(s)
    p10, p90 = _quantile(s, 0.1), _quantile(s, 0.9)
    return TimingStats(med, p10, p90, s[0], (p90 - p10) / med * 100 if med > 0 else 0.0, len(s))


def rotation_copies(bytes_per_set: int, l2_bytes: int, factor: float = L2_ROTATION_FACTOR,
                    max_copies: int = MAX_COPIES) -> int:
    """How many copies of one call's inputs+weights to rotate through so that the rotation
    spans >= factor x L2 (at least 2, at most max_copies; when max_copies cannot reach the
    target, the caller learns it from rotation_bytes / l2_bytes)."""
    if bytes_per_set <= 0:
        raise ValueError("bytes_per_set must be > 0")
    return max(2, min(max_copies, math.ceil(factor * l2_bytes / bytes_per_set)))


def partly_in_l2(rotation_bytes: float, l2_bytes: int, factor: float = L2_ROTATION_FACTOR) -> bool:
    """Whether a rotation of rotation_bytes (sets x a set's bytes) stays short of factor x L2, so
    part of each call is served from L2 (bench_kernels.py's B*, the scorecard's "(L2)")."""
    return rotation_bytes < factor * l2_bytes


def interleave_order(n_impls: int, rounds: int) -> list[int]:
    """A B B A ...: each round runs the implementations forward then backward, so every
    implementation has the same mean position in time. n_impls=2, rounds=1 -> [0, 1, 1, 0]."""
    if n_impls < 1 or rounds < 1:
        raise ValueError("need n_impls >= 1 and rounds >= 1")
    fwd = list(range(n_impls))
    return (fwd + fwd[::-1]) * rounds


def graph_calls(calls_per_graph: int, n_sets: int) -> int:
    """Calls captured per graph: at least one per rotated set. A graph cycles through the sets
    from set 0, so with fewer calls than sets the sets past the last call are never used and the
    rotation is only calls x the set's bytes (bench_kernels.py asked 50 calls of up to 64 sets
    until session 21)."""
    if calls_per_graph < 1 or n_sets < 1:
        raise ValueError("need calls_per_graph >= 1 and n_sets >= 1")
    return max(calls_per_graph, n_sets)


def roofline_fraction(min_bytes: int, bandwidth_bytes_per_s: float, time_us: float) -> float:
    """(bytes / measured bandwidth) / measured time: 1.0 is the HBM floor; > 1 is suspect."""
    if time_us <= 0 or bandwidth_bytes_per_s <= 0:
        return float("nan")
    return (min_bytes / bandwidth_bytes_per_s) / (time_us * 1e-6)


# ---- GPU side ------------------------------------------------------------------------
def elapsed_us(fn: Callable[[], object], cuda: bool = True) -> float:
    """Microseconds one call of fn() takes. With `cuda`: between two CUDA events recorded on the
    current stream before and after it, waiting for the end event, so the GPU work fn queues is
    what counts. Without: host wall time (perf_counter), for a run without a CUDA device."""
    if not cuda:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3


def measure_bandwidth(n_bytes: int = COPY_BENCH_BYTES, repeats: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted), median of repeats.
    The copy is shrunk to fit a quarter of the free device memory (source + destination)."""
    import torch

    free_bytes, _ = torch.cuda.mem_get_info()
    n_bytes = max(2**20, min(n_bytes, free_bytes // 4)) // 2**20 * 2**20
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times_us = [elapsed_us(lambda: dst.copy_(src)) for _ in range(repeats)]
    del src, dst
    return 2 * n_bytes / (statistics.median(times_us) * 1e-6)


def capture_graph(fn: Callable[[int], object], n_sets: int, calls: int, warmup: int = 3,
                  separator: Callable[[], None] | None = None):
    """Warm `fn(set_index)` up on a side stream, then capture `calls` calls cycling through
    the sets into one CUDA graph; `separator()` (if given) is captured before each call."""
    import torch

    if separator is not None:
        inner = fn

        def fn(i: int) -> None:
            separator()
            inner(i)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(warmup):
            fn(i % n_sets)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i % n_sets)
    torch.cuda.synchronize()
    return g


SEPARATOR = "_separator"          # the separator alone, timed with the others, then subtracted


def time_interleaved(impls: Mapping[str, Callable[[int], object]], n_sets: int, calls_per_graph: int = 100,
                     rounds: int = 10, warmup: int = 3, separate: bool = True) -> dict[str, TimingStats]:
    """Time each implementation `fn(set_index)` by CUDA-graph replay, interleaved A B B A.
    Each replay runs graph_calls(calls_per_graph, n_sets) calls (every set at least once); a
    sample is replay time / calls (us per call).
    With `separate` (the default) every call follows a separator kernel, and the separator's
    median per call, timed alone in the same interleaving, is subtracted from each sample."""
    import torch

    calls_per_graph = graph_calls(calls_per_graph, n_sets)

    separator: Callable[[], None] | None = None
    if separate:
        sep_buf = torch.zeros(1, dtype=torch.int32, device="cuda")

        def bump() -> None:
            sep_buf.add_(1)
        separator = bump
    runs = dict(impls)
    if separate:
        if SEPARATOR in runs:
            raise ValueError(f"time_interleaved: '{SEPARATOR}' is a reserved name")
        runs[SEPARATOR] = lambda i: None
    names = list(runs)
    graphs = {n: capture_graph(runs[n], n_sets, calls_per_graph, warmup, separator) for n in names}
    for n in names:                    # one untimed replay each: first-replay upload costs
        graphs[n].replay()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for idx in interleave_order(len(names), rounds):
        n = names[idx]
        samples[n].append(elapsed_us(graphs[n].replay) / calls_per_graph)
    del graphs
    return subtract_separator(samples) if separate else {n: summarize(v) for n, v in samples.items()}


def subtract_separator(samples: dict[str, list[float]]) -> dict[str, TimingStats]:
    """Per-call samples of separator + impl -> impl alone: each sample minus the separator's
    median (its own samples are dropped from the result)."""
    sep = statistics.median(samples[SEPARATOR])
    return {n: summarize([v - sep for v in vals]) for n, vals in samples.items() if n != SEPARATOR}
