"""The skinny_gemm families carry their own (K, N) table (a kernel may not import the
reference): in every committed candidate it must name the same GEMMs with the same sizes as
the reference's SHAPES."""
from __future__ import annotations

import pytest

from kernel_helpers import ROOT, load_module

KERNELS = sorted((ROOT / "kernels_generated" / "skinny_gemm").glob("*/kernel.py"))


@pytest.mark.parametrize("path", KERNELS, ids=[p.parent.name for p in KERNELS])
def test_kernel_gemm_table_equals_the_reference(path):
    from reference_impls.skinny_gemm import DEFAULT_SHAPE, SHAPES

    mod = load_module(path, f"skinny_shapes_{path.parent.name}")
    assert mod.GEMM_KN == SHAPES
    assert mod.DEFAULT_SHAPE == DEFAULT_SHAPE
    assert mod.gemm_kn("", 8) == SHAPES[8][DEFAULT_SHAPE]
    with pytest.raises(ValueError, match="no K3 GEMM 'nope' at TP16"):
        mod.gemm_kn("nope", 16)
    with pytest.raises(ValueError):
        mod.gemm_kn("latent_down", 4)
