"""scripts/count_step_ops.py: torch ops per decode step by catalogue op (the host cost that the
model gate's duration scales with on a GPU), and the MoE reference's one pass per layer."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reference_impls import moe_experts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cso():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import count_step_ops
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return count_step_ops


def test_counts_every_op_of_a_tiny_step(cso):
    r = cso.count("tiny", 3, 4, "cuda")
    assert r["ops_per_step"] == sum(r["by_op"].values())
    assert {"moe_experts", "moe_router", "kda_decode", "mla_decode", "attn_res"} <= set(r["by_op"])
    assert moe_experts.DEFINITION.reference is moe_experts.reference       # the swap is undone


def test_moe_reference_takes_few_passes_at_the_gate_batch(cso):
    """The CUDA form decodes the gate's 4 x 16 (token, slot) pairs in chunks of 32: two passes
    per MoE layer, not one per slot (the 16-pass form dispatched ~1,076 ops per layer)."""
    r = cso.count("tiny", 3, 4, "cuda")
    per_layer = r["by_op"]["moe_experts"] / r["moe_layers"]
    assert r["moe_layers"] >= 1 and per_layer < 200, r["by_op"]
    assert 4 * 16 / moe_experts.ROWS_PER_CHUNK <= 2


def test_bad_preset_is_a_clean_error():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "count_step_ops.py"), "--preset", "nope"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and "unknown model config" in p.stderr and "Traceback" not in p.stderr
