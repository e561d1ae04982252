"""The skinny_gemm families carry their own (K, N) table (a kernel may not import the
reference): it must name the same GEMMs with the same sizes as the reference's SHAPES."""
from __future__ import annotations

from kernel_helpers import ROOT


def _kernel_table() -> dict:
    from harness.agent.families import load_family

    ns: dict = {}
    fam = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    src = fam.render(fam.start())
    start = src.index('DEFAULT_SHAPE = "')
    end = src.index("\nVEC = ")
    exec(compile(src[start:end], "table", "exec"), ns)     # the rendered table + gemm_kn only
    return ns


def test_kernel_gemm_table_equals_the_reference():
    from reference_impls.skinny_gemm import DEFAULT_SHAPE, SHAPES

    ns = _kernel_table()
    assert ns["GEMM_KN"] == SHAPES
    assert ns["DEFAULT_SHAPE"] == DEFAULT_SHAPE
    assert ns["gemm_kn"]("", 8) == SHAPES[8][DEFAULT_SHAPE]


def test_kernel_gemm_table_rejects_unknown_names():
    import pytest

    ns = _kernel_table()
    with pytest.raises(ValueError, match="no K3 GEMM 'nope' at TP16"):
        ns["gemm_kn"]("nope", 16)
    with pytest.raises(ValueError):
        ns["gemm_kn"]("latent_down", 4)
