"""perf_sweep's incumbent per point with several promoted kernels of one op (`_incumbents`):
what runs each point today, and whether the candidate would run it after its promotion."""
from __future__ import annotations

import json

from gates import GateContext, load_config
from gates._perf_gpu import _incumbents
from gates.points import key
from harness.opdef import Point
from harness.toolchain.candidate import Scope

OP = "skinny_gemm"
SHAPES = ["latent_down", "latent_up", "mla_qkv_a"]
BROAD = {"archs": ["sm_90a"], "tp": [8, 16], "batch": [1, 8], "dtypes": ["bf16"], "state_dtypes": [], "shapes": SHAPES}
NARROW = {**BROAD, "shapes": ["mla_qkv_a"]}


def _who(tmp_path, manifest, candidate: str, scope: dict, points):
    (tmp_path / "kernels_generated").mkdir(exist_ok=True)
    (tmp_path / "kernels_generated" / "promoted.json").write_text(json.dumps(manifest))
    ctx = GateContext(op=OP, candidate_id=candidate, root=tmp_path, config=load_config())
    return _incumbents(ctx, Scope.from_json(scope), "sm_90a", points)


def _pt(shape: str, batch: int = 1, tp: int = 8) -> Point:
    return Point(batch=batch, tp=tp, shape=shape)


def test_a_narrow_candidate_is_timed_against_the_broad_kernel(tmp_path):
    manifest = [{"op": OP, "candidate": "broad", "scope": BROAD}]
    who = _who(tmp_path, manifest, "narrow", NARROW, [_pt("mla_qkv_a"), _pt("mla_qkv_a", 8, 16)])
    assert set(who.values()) == {("broad", "narrow")}


def test_a_broad_candidate_is_shadowed_where_a_narrow_kernel_stays(tmp_path):
    manifest = [{"op": OP, "candidate": "broad", "scope": BROAD}, {"op": OP, "candidate": "narrow", "scope": NARROW}]
    pts = [_pt(s) for s in SHAPES]
    who = _who(tmp_path, manifest, "new", BROAD, pts)           # replaces "broad", not "narrow"
    assert who[key(pts[0])] == ("broad", "new") and who[key(pts[1])] == ("broad", "new")
    assert who[key(pts[2])] == ("narrow", "narrow")
    # re-gating the promoted broad kernel: itself left out, reference where nothing else runs
    who = _who(tmp_path, manifest, "broad", BROAD, pts)
    assert who[key(pts[0])] == ("", "broad") and who[key(pts[2])] == ("narrow", "narrow")


def test_a_candidate_of_the_narrow_scope_replaces_the_narrow_kernel(tmp_path):
    manifest = [{"op": OP, "candidate": "broad", "scope": BROAD}, {"op": OP, "candidate": "narrow", "scope": NARROW}]
    who = _who(tmp_path, manifest, "new", NARROW, [_pt("mla_qkv_a", 4)])
    assert list(who.values()) == [("narrow", "new")]


def test_no_manifest_means_the_reference(tmp_path):
    ctx = GateContext(op=OP, candidate_id="new", root=tmp_path, config=load_config())
    assert list(_incumbents(ctx, Scope.from_json(NARROW), "sm_90a", [_pt("mla_qkv_a")]).values()) == [("", "new")]
