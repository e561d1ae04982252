"""perf_sweep's per-layer A/B (`_layer_ab.layer_ab`): the decode step with the kernel on vs off,
CUDA-graph replays on a GPU, eager steps without one; a kernel that costs time shows up."""
from __future__ import annotations

import time

import pytest
import torch

from gates import _k3, _layer_ab
from harness import paths

from gate_repo_helpers import reference_kernel

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _host_sleep(_kw) -> None:
    time.sleep(0.010)


def test_eager_without_a_gpu_and_both_paths_sampled_alike():
    pair = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cpu", on_fn=reference_kernel("situ_and_mul"))
    r = _layer_ab.layer_ab(pair, batch=2, rounds=2, steps_per_sample=1, warmup=1)
    assert r["mode"] == "eager" and "no CUDA device" in r["graph_error"]
    assert r["stats"]["on"]["n_samples"] == r["stats"]["off"]["n_samples"] == 4     # A B B A x 2
    assert r["kernel_calls_on"] > 0 and r["kernel_calls_off"] == 0
    assert r["on_us"] > 0 and r["off_us"] > 0 and r["n_layers"] == pair.cfg.n_layers


def test_a_kernel_that_costs_time_is_slower_on():
    """10 ms of host sleep in every kernel call: the on path's per-layer time must carry it (the
    tiny step's eager work is ~10 ms a layer on one CPU thread, on and off within ~1 ms)."""
    pair = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cpu",
                          on_fn=reference_kernel("situ_and_mul", _host_sleep))
    r = _layer_ab.layer_ab(pair, batch=1, rounds=2, steps_per_sample=1, warmup=1)
    assert r["kernel_calls_on"] >= pair.cfg.n_layers      # at least one call a layer
    assert r["on_us"] - r["off_us"] > 0.8 * 10_000


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_replays_on_a_gpu_and_see_gpu_time():
    """On CUDA the step is captured (mode "graph") and a kernel that spins the GPU ~50 us a
    call reads slower per layer than the reference by at least that much; the plain A/B's
    samples agree within a few percent."""
    plain = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cuda", on_fn=reference_kernel("situ_and_mul"))
    r = _layer_ab.layer_ab(plain, batch=2, rounds=5, steps_per_sample=4)
    assert r["mode"] == "graph" and r["graph_error"] == ""
    assert r["kernel_calls_on"] > 0 and r["kernel_calls_off"] == 0
    assert r["noise_rel"] < 0.05, r["stats"]

    spin = _k3.build_pair("situ_and_mul", None, paths.root(), "tiny", 0, "cuda",
                          on_fn=reference_kernel("situ_and_mul", lambda kw: torch.cuda._sleep(100_000)))
    s = _layer_ab.layer_ab(spin, batch=2, rounds=5, steps_per_sample=4)
    assert s["mode"] == "graph"
    assert s["on_us"] - s["off_us"] > 20.0, s        # 1e5 cycles at ~1.8 GHz: ~55 us a call
