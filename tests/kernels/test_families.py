"""Every kernel family loads, its declared default renders, and each committed human
candidate is exactly its family point rendered (so a template edit must be re-rendered)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import render_human
from harness.agent.families import load_families
from harness.toolchain.candidate import Scope, candidate_id, load_candidate

ROOT = Path(__file__).resolve().parents[2]
OPS = sorted(p.name for p in (ROOT / "prompts" / "kernels").iterdir() if p.is_dir() and not p.name.startswith("_"))


@pytest.mark.parametrize("op", OPS)
def test_family_default_renders_valid_python(op):
    fams = load_families(op, ROOT / "prompts")
    assert fams, f"no families under prompts/kernels/{op}"
    for fam in fams:
        start = fam.start()
        assert start is not None and fam.feasible(start)
        src = fam.render(start)
        compile(src, f"{fam.name}.py", "exec")          # Python syntax, not CUDA
        assert "def compile(" in src and "def launch(" in src
        Scope.from_json(fam.scope)


@pytest.mark.parametrize("op", OPS)
def test_family_renders_pass_the_static_check(op):
    """What the agent renders from any family, and every committed candidate of the op, passes
    the static gate (a template importing reference_impls once made every skinny_gemm
    candidate unpromotable while it still compiled and benchmarked)."""
    from harness.toolchain.static_check import check_candidate, check_source, launch_tensor_names

    names = launch_tensor_names(op)
    for fam in load_families(op, ROOT / "prompts"):
        for params in (fam.start(), *itertools.islice(fam.iter_configs(), 3)):
            rep = check_source(fam.render(params), names)
            assert rep.ok, (fam.name, params, [f.message for f in rep.findings])
    for meta in sorted((ROOT / "kernels_generated" / op).glob("*/candidate.json")):
        rep = check_candidate(load_candidate(op, meta.parent))
        assert rep.ok, (meta.parent.name, [f.message for f in rep.findings])


def test_human_candidates_match_their_render(human_points):
    from harness.agent.families import load_family

    assert human_points
    for pt in human_points:
        fam = load_family(ROOT / "prompts/kernels" / pt["op"] / f"{pt['family']}.py.j2", pt["op"])
        assert fam.feasible(pt["params"]), pt
        src = fam.render(pt["params"])
        scope = Scope.from_json(render_human.point_scope(fam.scope, pt))
        cid = candidate_id(src, scope)
        cand = load_candidate(pt["op"], cid)           # raises if the folder is missing or stale
        assert cand.source == src
        assert cand.provenance.author == "human"
        assert cand.provenance.template == {"family": pt["family"], "params": pt["params"]}


def test_human_points_are_listed_once(human_points):
    """Each (op, family, params) appears once: a duplicate would be benchmarked and compiled twice."""
    import json

    keys = [json.dumps({k: p.get(k) for k in ("op", "family", "params", "scope")}, sort_keys=True)
            for p in human_points]
    assert len(keys) == len(set(keys)), [k for k in set(keys) if keys.count(k) > 1]


def test_point_scope_only_narrows():
    fam = {"archs": ["sm_90a", "sm_103a"], "tp": [8, 16], "batch": [1, 64], "shapes": ["a", "b", "c"]}
    pt = {"op": "skinny_gemm", "label": "t", "scope": {"batch": [1, 8], "shapes": ["a", "c"]}}
    got = render_human.point_scope(fam, pt)
    assert got["batch"] == [1, 8] and got["shapes"] == ["a", "c"] and got["tp"] == [8, 16]
    assert render_human.point_scope(fam, {"op": "x", "label": "t"}) == fam
    for bad in ({"batch": [1, 128]}, {"shapes": ["a", "z"]}, {"tp": []}, {"dtypes": ["bf16"]}):
        with pytest.raises(ValueError):
            render_human.point_scope(fam, {"op": "x", "label": "t", "scope": bad})


@pytest.mark.parametrize("op", OPS)
def test_large_spaces_are_searched_without_enumeration(op, monkeypatch):
    """The agent's search lists only spaces of up to ENUMERATE_MAX points (a hybrid family with two
    plans of many knobs each once made the listing run for hours); a larger space is sampled, so it
    must carry a feasible default (start() returns it without a walk). Enumerating a large space is
    refused here, so a search that still did would fail."""
    from harness.agent.families import ENUMERATE_MAX, Family
    from harness.agent.search import HalvingSearch

    fams = load_families(op, ROOT / "prompts")
    big = {f.name for f in fams if f.size() > ENUMERATE_MAX}
    for f in fams:
        assert f.name not in big or (f.default and f.feasible(f.default)), f.name
    walk = Family.iter_configs

    def guarded(self):
        assert self.name not in big, f"{self.name}: its {self.size()} points enumerated"
        return walk(self)

    monkeypatch.setattr(Family, "iter_configs", guarded)
    search = HalvingSearch(fams, seed=0)
    first = search.propose(8, {}, 1)
    scores = {q.key: float(i) for i, q in enumerate(first)}
    nxt = search.propose(8, scores, 2)
    assert first and nxt and not {q.key for q in nxt} & set(scores)
    assert all(search.families[q.family].feasible(q.params) for q in first + nxt)
