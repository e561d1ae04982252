"""Model tests run tiny configs on the CPU: one torch thread (the CI box has 2 cores and
other suites run beside us; more threads only oversubscribe)."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_weights():
    from harness.model import get_config, init_weights

    return init_weights(get_config("tiny"), seed=0)
