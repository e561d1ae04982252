"""The `<incumbent>_b64_xlarge` human points (session 57): each is a promoted skinny_gemm kernel
(scope B 1..8) with `xlarge` on and unroll_large 4, scoped B 1..64, to replace it, so that its shapes
run a kernel instead of the fp32 reference at B 16..64 (on the H100 these renders ran 0.28-1.31x
cuBLAS's speed there; the reference is 2.5-10x slower than them: results/h100/session57).

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

KNOBS = {"xlarge": True, "unroll_large": 4}


def _points() -> list[dict]:
    pts = json.loads((ROOT / "prompts/kernels/human_candidates.json").read_text())["candidates"]
    return [p for p in pts if p["op"] == "skinny_gemm" and p["label"].endswith("_b64_xlarge")]


def _incumbent(pt: dict) -> dict:
    """The promoted entry the point replaces (its id starts with the label's prefix)."""
    prefix = pt["label"].split("_")[0]
    found = [e for e in read_manifest(ROOT) if e["op"] == "skinny_gemm" and e["candidate"].startswith(prefix)]
    assert len(found) == 1, (pt["label"], found)
    return found[0]


def _candidate_dir(pt: dict) -> Path:
    """The committed folder rendered from the point (its template and scope are the point's)."""
    for c in list_candidates("skinny_gemm"):
        sc = c.scope.to_json()
        if c.provenance.author == "human" and c.provenance.template == {"family": pt["family"], "params": pt["params"]} \
                and {k: sc[k] for k in pt["scope"]} == pt["scope"]:
            return c.path
    raise AssertionError(f"no committed folder for {pt['label']}: run prompts/kernels/render_human.py")


def test_one_point_per_promoted_skinny_kernel():
    promoted = {e["candidate"][:6] for e in read_manifest(ROOT) if e["op"] == "skinny_gemm"}
    assert {p["label"].split("_")[0] for p in _points()} == promoted


@pytest.mark.parametrize("label", [p["label"] for p in _points()])
def test_the_incumbents_params_and_scope_but_the_large_kernel_knobs_and_b64(label):
    pt = next(p for p in _points() if p["label"] == label)
    inc = _incumbent(pt)
    inc_params = json.loads((ROOT / "kernels_generated/skinny_gemm" / inc["candidate"] / "candidate.json")
                            .read_text())["provenance"]["template"]["params"]
    assert {k: v for k, v in pt["params"].items() if k not in KNOBS} == \
        {k: v for k, v in inc_params.items() if k not in KNOBS}
    assert {k: pt["params"][k] for k in KNOBS} == KNOBS
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
