"""kda_decode `fused_lb`: the fused family's kernel with launch bounds. Its every feasible point
renders exactly the fused kernel at the same parameters plus the launch-bounds constants and
kwargs (so fused's CPU emulation and GPU checks speak for its math), and the committed points'
PTX carries .maxntid THREADS and .minnctapersm MIN_CTAS_PER_SM."""
from __future__ import annotations

import difflib
import re

import pytest

from kernel_helpers import ROOT, compiled_ptx, family_candidates, load_module


def test_every_point_is_the_fused_kernel_plus_launch_bounds():
    from harness.agent.families import load_family

    lb = load_family(ROOT / "prompts/kernels/kda_decode/fused_lb.py.j2", "kda_decode")
    fused = load_family(ROOT / "prompts/kernels/kda_decode/fused.py.j2", "kda_decode")
    configs = lb.configs()
    assert configs
    for c in configs:
        base = {k: v for k, v in c.items() if k != "min_ctas_per_sm"}
        diff = list(difflib.unified_diff(fused.render(base).splitlines(), lb.render(c).splitlines(), lineterm="", n=0))
        added = [l[1:] for l in diff if l.startswith("+") and not l.startswith("+++")]
        removed = [l[1:] for l in diff if l.startswith("-") and not l.startswith("---")]
        # what changes: the header's family and parameters, and each launch gains **OCCUPANCY
        assert [r for r in removed if "Rendered from" not in r and "warps=" not in r and "use_pdl=USE_PDL)" not in r] == [], c
        assert sum("**OCCUPANCY)" in l for l in added) == sum("use_pdl=USE_PDL)" in l for l in removed) == 2, c
        assert f"MIN_CTAS_PER_SM = {c['min_ctas_per_sm']}" in added, c


@pytest.mark.parametrize("cid", family_candidates("kda_decode", "fused_lb"))
def test_ptx_carries_the_launch_bounds(cid, tmp_path):
    path = ROOT / "kernels_generated/kda_decode" / cid / "kernel.py"
    m = load_module(path, f"kda_lb_{cid}")
    ptx = compiled_ptx(path, tmp_path, state_dtype="fp32")
    assert re.search(rf"\.maxntid {m.THREADS}, 1, 1", ptx), "maxntid"
    assert re.search(rf"\.minnctapersm {m.MIN_CTAS_PER_SM}\b", ptx), "minnctapersm"
