"""The `<incumbent>_b64_xlarge` human points (session 57): each is a promoted skinny_gemm kernel
(scope B 1..8) with the B <= 64 kernel's knobs changed (xlarge on and unroll_large 4), scoped B 1..64,
to replace it, so that its shapes run a kernel instead of the fp32 reference at B 16..64 (on the H100
these renders ran 0.28-1.31x cuBLAS's speed there; the reference is 2.5-10x slower than them:
results/h100/session57). REPLACEMENTS maps a label suffix to its knobs: `_b64_pipe` (session 58) adds
lpipe's pipelined tile GEMM for B 17..64 (lp_from 16), the xlarge loop still running B 9..16;
`_b64_tclass` (session 60) runs lpipe from B = 9 (lp_from 0) with lp_tclass; `_b64_midpipe` (session 62)
runs lp_tclass with a cp.async ring at B 9..32 (lp_midpipe's twin kernel) and lp_tma above, `_b64_midpipe_xg4`
the same with lp_xgroup 4 (session 62's H100 bench: results/h100/session62). `_b64_nosplit8` (session 67) is
`_b64_midpipe_xg4` without the pipes' split-K (lp_cluster 1) on an 8-stage ring, scoped to its incumbent's
shapes and TPs or some of them (NARROWED: the small-K GEMMs where it measured 15-50% faster than the
`_b64_midpipe_xg4` kernels at B 16..64, results/h100/session67). Where its scope is narrower than the
`_b64_midpipe_xg4` kernel's it is gated beside it (the most specific kernel runs); where equal, after that
kernel's demotion, as before. `_b64_nosplit8mc2` (session 68) adds lp_minctas 2, the launch bound that keeps
its lp_tma kernel from spilling on sm_103a at K 768.

Gating one needs its incumbent demoted first: the model gate decodes 4 rows, where the narrower
incumbent would shadow it (README, "Next GPU work"). That is sound only if, at B 1..8, a replacement
runs its incumbent's code. This checks it through the PTX: the small kernel is instruction for
instruction the incumbent's, and only the two knobs of the B <= 64 kernel differ."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from harness.promotion import read_manifest
from harness.toolchain.candidate import list_candidates
from kernel_helpers import ROOT, swapab_kernels, without_kernel_ids

# label suffix -> the knobs a replacement sets (every other param is its incumbent's)
XLARGE = {"xlarge": True, "unroll_large": 4}
PIPE_5E5B0F = {**XLARGE, "lpipe": True, "lp_warps": 4, "lp_mtiles": 1, "lp_stages": 3, "lp_sblocks": 2, "lp_ctas": 396,
               "lp_cluster": 8}                                   # session 58's lpipe plan
# session 62: B 9..32 the cp.async twin (lp_midpipe), B 33..64 the lp_tma pipe, both per token-tile class
MIDPIPE = {**PIPE_5E5B0F, "lp_from": 32, "lp_tclass": True, "lp_tma": True, "lp_midpipe": True}
# session 67: no split-K in either pipe (one CTA a 64-row tile over all of K, as cuBLAS runs these), 8 stages
NOSPLIT8 = {**MIDPIPE, "lp_xgroup": 4, "lp_cluster": 1, "lp_stages": 8}
REPLACEMENTS = {
    "_b64_xlarge": XLARGE,
    # session 58: the xlarge loop up to B = 16, lpipe's 5e5b0f plan above it
    "_b64_pipe": {**PIPE_5E5B0F, "lp_from": 16},
    # session 60: lpipe from B = 9, its main loop built per token-tile class (lp_tclass); no xlarge loop runs
    "_b64_tclass": {**PIPE_5E5B0F, "lp_from": 0, "lp_tclass": True},
    "_b64_midpipe": MIDPIPE,
    "_b64_midpipe_xg4": {**MIDPIPE, "lp_xgroup": 4},
    "_b64_nosplit8": NOSPLIT8,
    # session 68: the same with ptxas's launch bound for 2 CTAs an SM, a register bound only (the 128 KiB ring fits
    # one CTA an SM). Without it ptxas allocates the 160-thread lp_tma kernel 72 registers on sm_103a and it
    # spills 8 bytes at K 768; with it, 82 and no spill
    "_b64_nosplit8mc2": {**NOSPLIT8, "lp_minctas": 2},
}
NARROWED = ("_b64_nosplit8", "_b64_nosplit8mc2")   # scope: the incumbent's shapes and TPs or a part of them (still B 1..64)


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p for p in pts if p["op"] == "skinny_gemm" and p["label"].endswith(tuple(REPLACEMENTS))]


def _knobs(pt: dict) -> dict:
    return next(k for suffix, k in REPLACEMENTS.items() if pt["label"].endswith(suffix))


def _incumbent(pt: dict) -> dict:
    """The kernel the point replaces: the committed candidate whose id starts with the label's prefix,
    as {"candidate", "scope"} (promoted, or demoted to gate the point: README, Next GPU work)."""
    prefix = pt["label"].split("_")[0]
    found = [c for c in list_candidates("skinny_gemm") if c.id.startswith(prefix)]
    assert len(found) == 1, (pt["label"], [c.id for c in found])
    return {"candidate": found[0].id, "scope": found[0].scope.to_json()}


def _candidate_dir(pt: dict) -> Path:
    """The committed folder rendered from the point (its template and scope are the point's)."""
    for c in list_candidates("skinny_gemm"):
        sc = c.scope.to_json()
        if c.provenance.author == "human" and c.provenance.template == {"family": pt["family"], "params": pt["params"]} \
                and {k: sc[k] for k in pt["scope"]} == pt["scope"]:
            return c.path
    raise AssertionError(f"no committed folder for {pt['label']}: run prompts/kernels/render_human.py")


def test_every_promoted_skinny_kernel_has_an_xlarge_point():
    """Each promoted B 1..8 kernel has its replacement (a demoted one keeps its point: the demotion is
    reverted when the replacement fails its gates)."""
    promoted = {e["candidate"][:6] for e in read_manifest(ROOT) if e["op"] == "skinny_gemm"
                and e["scope"]["batch"] == [1, 8]}
    assert promoted <= {p["label"].split("_")[0] for p in _points() if p["label"].endswith("_b64_xlarge")}


@pytest.mark.parametrize("label", [p["label"] for p in _points()])
def test_the_incumbents_params_and_scope_but_the_large_kernel_knobs_and_b64(label):
    pt = next(p for p in _points() if p["label"] == label)
    inc = _incumbent(pt)
    inc_params = json.loads((ROOT / "kernels_generated/skinny_gemm" / inc["candidate"] / "candidate.json")
                            .read_text())["provenance"]["template"]["params"]
    knobs = _knobs(pt)
    assert {k: v for k, v in pt["params"].items() if k not in knobs} == \
        {k: v for k, v in inc_params.items() if k not in knobs}
    assert {k: pt["params"][k] for k in knobs} == knobs
    if pt["label"].endswith(NARROWED):
        assert pt["scope"]["batch"] == [1, 64] and set(pt["scope"]) == {"tp", "batch", "shapes"}
        assert set(pt["scope"]["tp"]) <= set(inc["scope"]["tp"])
        assert set(pt["scope"]["shapes"]) <= set(inc["scope"]["shapes"])
    else:
        assert pt["scope"] == {"tp": inc["scope"]["tp"], "batch": [1, 64], "shapes": inc["scope"]["shapes"]}


@pytest.mark.parametrize("label", [p["label"] for p in _points()])
def test_the_small_kernel_is_the_incumbents_instruction_for_instruction(label, tmp_path):
    """At the point's first shape and TP (sm_90a): equal small-kernel PTX, a different large one."""
    pt = next(p for p in _points() if p["label"] == label)
    inc = _incumbent(pt)
    tp, shape = pt["scope"]["tp"][0], pt["scope"]["shapes"][0]
    d = Path(tempfile.mkdtemp(prefix="b64_", dir=tmp_path))
    small_new, large_new = swapab_kernels(_candidate_dir(pt) / "kernel.py", d, tp, shape)
    small_old, large_old = swapab_kernels(ROOT / "kernels_generated/skinny_gemm" / inc["candidate"] / "kernel.py",
                                          d, tp, shape)
    assert without_kernel_ids(small_new) == without_kernel_ids(small_old)
    assert without_kernel_ids(large_new) != without_kernel_ids(large_old)
