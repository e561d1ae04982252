"""Each human candidate compiles for sm_90a and sm_103a (CPU only, through the toolchain's
sandboxed compile and cache), with no local-memory spills and only 128-bit global loads
where the kernel streams data."""
from __future__ import annotations

import itertools

import pytest

import reference_impls
from harness.toolchain.candidate import list_candidates
from harness.toolchain.compile import compile_candidate, static_keys

ARCHS = ("sm_90a", "sm_103a")
# ops whose every global load is a 16-byte vector by construction
ALL_LOADS_128B = {"moe_router", "situ_and_mul", "add_rmsnorm", "attn_res", "skinny_gemm"}
# ops whose kernel is the same at every TP (H = 7168 is replicated; the router is not sharded)
TP_INDEPENDENT = {"moe_router", "add_rmsnorm", "attn_res"}


def _human(op):
    """The candidates rendered from human_candidates.json (other engineers' folders excluded)."""
    import json
    from pathlib import Path

    pts = json.loads((Path(__file__).resolve().parents[2] / "prompts/kernels/human_candidates.json").read_text())
    mine = [{"family": p["family"], "params": p["params"]} for p in pts["candidates"] if p["op"] == op]
    return [c for c in list_candidates(op) if c.provenance.author == "human" and c.provenance.template in mine]


def _cases():
    import json
    from pathlib import Path

    pts = json.loads((Path(__file__).resolve().parents[2] / "prompts/kernels/human_candidates.json").read_text())
    ops = sorted({p["op"] for p in pts["candidates"]})
    return [(op, c.id, arch) for op in ops for c in _human(op) for arch in ARCHS]


@pytest.mark.slow
@pytest.mark.parametrize("op,cid,arch", _cases())
def test_candidate_compiles_without_spills(op, cid, arch):
    cand = next(c for c in _human(op) if c.id == cid)
    defn = reference_impls.get(op)
    for tp, static in itertools.product(cand.scope.tp[:1] if op in TP_INDEPENDENT else cand.scope.tp,
                                        static_keys(defn, cand)):     # e.g. both state dtypes of kda_decode
        rep = compile_candidate(cand, arch, tp, static)
        assert rep.ok, f"{rep.message}\n{rep.diagnostics[-2000:]}"
        assert rep.spill_bytes == 0, rep.kernels
        assert rep.kernels, "ptxas reported no kernels"
        if op in ALL_LOADS_128B:
            # every global load is one vector of the family's width (16 bytes unless vec says less)
            vec_bits = str(16 * int((cand.provenance.template or {}).get("params", {}).get("vec", 8)))
            assert set(rep.global_loads_by_bits) == {vec_bits}, rep.global_loads_by_bits
