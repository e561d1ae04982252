"""Each human candidate compiles for sm_90a and sm_103a (CPU only, through the toolchain's
sandboxed compile and cache), with no local-memory spills and only 128-bit global loads
where the kernel streams data.

The whole (TP x static key) matrix is compiled for every promoted kernel and for one
candidate per family (the first by id: it covers the family's code paths per shape and state
dtype); the family's other points compile a sample of it (first TP, every third static key).
skinny_gemm's 13 shapes x 2 TPs x 2 archs per candidate would otherwise take ~20 minutes of
CI on two cores."""
from __future__ import annotations

import itertools

import pytest

import reference_impls
from harness.toolchain.candidate import list_candidates
from harness.toolchain.compile import compile_many, static_keys

ARCHS = ("sm_90a", "sm_103a")
# ops whose every global load is a 16-byte vector by construction
ALL_LOADS_128B = {"moe_router", "situ_and_mul", "add_rmsnorm", "attn_res", "skinny_gemm", "gemm_situ_and_mul"}
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


def _promoted_ids() -> set[str]:
    import json
    from pathlib import Path

    manifest = Path(__file__).resolve().parents[2] / "kernels_generated/promoted.json"
    return {e["candidate"] for e in json.loads(manifest.read_text())}


def compile_plan(op: str, cand, peers) -> list[tuple[int, dict]]:
    """(tp, static key) pairs to compile: the full matrix for a promoted kernel or the first
    candidate (by id) of its family among `peers`, a sample for the others."""
    defn = reference_impls.get(op)
    tps = list(cand.scope.tp[:1] if op in TP_INDEPENDENT else cand.scope.tp)
    keys = static_keys(defn, cand)                  # e.g. both state dtypes of kda_decode, 13 GEMM shapes
    family = (cand.provenance.template or {}).get("family")
    first = min(c.id for c in peers if (c.provenance.template or {}).get("family") == family)
    if cand.id == first or cand.id in _promoted_ids():
        return list(itertools.product(tps, keys))
    return list(itertools.product(tps[:1], keys[::3]))


def test_compile_plan_covers_every_key_once_per_family():
    """Each family has one candidate compiling the full matrix; samples are non-empty."""
    for op in ("skinny_gemm", "kda_decode", "attn_res"):
        peers = _human(op)
        if not peers:
            continue
        defn = reference_impls.get(op)
        n_tp = lambda c: 1 if op in TP_INDEPENDENT else len(c.scope.tp)          # noqa: E731
        full = [c for c in peers if len(compile_plan(op, c, peers)) == n_tp(c) * len(static_keys(defn, c))]
        assert {(c.provenance.template or {}).get("family") for c in full} == \
            {(c.provenance.template or {}).get("family") for c in peers}
        assert all(compile_plan(op, c, peers) for c in peers)


@pytest.mark.slow
@pytest.mark.parametrize("op,cid,arch", _cases())
def test_candidate_compiles_without_spills(op, cid, arch):
    peers = _human(op)
    cand = next(c for c in peers if c.id == cid)
    plan = [(arch, tp, static) for tp, static in compile_plan(op, cand, peers)]
    for rep in compile_many(cand, plan):                 # the plan's keys in parallel, one child each
        assert rep.ok, f"{rep.message}\n{rep.diagnostics[-2000:]}"
        assert rep.spill_bytes == 0, rep.kernels
        assert rep.kernels, "ptxas reported no kernels"
        if op in ALL_LOADS_128B:
            # every global load is one vector of the family's width (16 bytes unless vec says less)
            vec_bits = str(16 * int((cand.provenance.template or {}).get("params", {}).get("vec", 8)))
            assert set(rep.global_loads_by_bits) == {vec_bits}, rep.global_loads_by_bits
