"""The template agent's search on a synthetic cost model (no compiles): it must find the
global best of a space with one basin, an interaction term and infeasible/failing points,
using far fewer evaluations than the space holds."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.agent.families import Family, load_families, params_key
from harness.agent.search import FAILED, HalvingSearch, compile_proxy

SPACE = {"threads": [32, 64, 128, 256, 512], "vec": [1, 2, 4, 8], "split_k": [1, 2, 4, 7, 14], "unroll": [1, 2, 4]}


def synthetic_cost(p: dict) -> float:
    """Bowl with its minimum at threads=128, vec=8, split_k=7, unroll=2 and an interaction."""
    if p["threads"] == 512 and p["vec"] == 8:
        return FAILED                                  # "spills": refuses to compile
    i = {k: SPACE[k].index(v) for k, v in p.items()}
    return ((i["threads"] - 2) ** 2 + 1.5 * (i["vec"] - 3) ** 2 + (i["split_k"] - 3) ** 2
            + 0.5 * (i["unroll"] - 1) ** 2 + 0.3 * abs((i["threads"] - 2) * (i["split_k"] - 3)) + 10.0)


def _family(tmp_path: Path, constraints=()) -> Family:
    tpl = tmp_path / "kernels" / "moe_router" / "synthetic.py.j2"
    tpl.parent.mkdir(parents=True)
    tpl.write_text("THREADS = {{ threads }}\nVEC = {{ vec }}\nSPLIT_K = {{ split_k }}\nUNROLL = {{ unroll }}\n")
    (tpl.parent / "synthetic.space.json").write_text(json.dumps(
        {"params": SPACE, "constraints": list(constraints), "default": {"threads": 32, "vec": 1, "split_k": 1, "unroll": 1}}))
    return load_families("moe_router", tmp_path)[0]


def _run(search: HalvingSearch, k: int, rounds: int) -> dict[str, float]:
    scores: dict[str, float] = {}
    for r in range(1, rounds + 1):
        for p in search.propose(k, scores, r):
            scores[p.key] = synthetic_cost(p.params)
    return scores


def test_search_finds_the_best_configuration(tmp_path):
    fam = _family(tmp_path)
    space = fam.configs()
    truth = min(space, key=synthetic_cost)
    search = HalvingSearch([fam], seed=1)
    scores = _run(search, k=4, rounds=12)
    best_key, best_score = search.best(scores)
    assert best_key == params_key(fam.name, truth)
    assert best_score == synthetic_cost(truth)
    assert len(scores) <= 48 < len(space)              # 48 of 300 points tried
    assert len(scores) == len(set(scores))             # never the same point twice


def test_search_respects_constraints_and_never_repeats(tmp_path):
    fam = _family(tmp_path, constraints=["threads * vec <= 1024"])
    search = HalvingSearch([fam], seed=3)
    scores = _run(search, k=5, rounds=30)
    for key in scores:
        p = json.loads(key.split(":", 1)[1])
        assert p["threads"] * p["vec"] <= 1024
    assert len(scores) == len({k for k in scores})


def test_search_recovers_when_every_point_of_a_round_fails(tmp_path):
    fam = _family(tmp_path)
    search = HalvingSearch([fam], seed=0)
    first = search.propose(3, {}, 1)
    assert first[0].params == fam.default                # the declared start point first
    scores = {p.key: FAILED for p in first}
    nxt = search.propose(3, scores, 2)
    assert len(nxt) == 3 and not {p.key for p in nxt} & set(scores)


def test_render_is_strict(tmp_path):
    fam = _family(tmp_path)
    src = fam.render({"threads": 64, "vec": 4, "split_k": 2, "unroll": 1})
    assert "THREADS = 64" in src and "VEC = 4" in src
    with pytest.raises(ValueError):
        fam.render({"threads": 3, "vec": 4, "split_k": 2, "unroll": 1})


def test_a_knob_missing_from_a_point_takes_the_default(tmp_path):
    """A knob added to a family later: points recorded before it still render, as its default."""
    fam = _family(tmp_path)
    old_point = {"threads": 64, "vec": 4, "split_k": 2}            # recorded before `unroll` existed
    assert fam.feasible(old_point)
    assert fam.render(old_point) == fam.render({**old_point, "unroll": 1})
    assert all("unroll" in q for q in fam.neighbours(old_point))
    fam2 = Family(fam.op, fam.name, fam.template_path, fam.params, default={})
    assert not fam2.feasible(old_point)                            # no default: the point is incomplete
    with pytest.raises(ValueError):
        fam2.render(old_point)


def test_compile_proxy_orders_spills_then_registers():
    no_spill_many_regs = compile_proxy([200, 180], [0, 0], [4, 4])
    spill_few_regs = compile_proxy([64, 64], [16, 0], [4, 4])
    few_regs = compile_proxy([64, 60], [0, 0], [0, 0])
    assert few_regs < no_spill_many_regs < spill_few_regs
    assert compile_proxy([64], [0], [8]) < compile_proxy([64], [0], [0])
    assert math.isfinite(compile_proxy([None], [None], [None]))


def test_a_space_too_large_to_list_is_sampled_and_still_searched(tmp_path, monkeypatch):
    """10 knobs of 4 values (1,048,576 points, over ENUMERATE_MAX): the search never lists the space
    (configs() would raise) yet finds the bottom of a bowl in a few hundred evaluations, proposing
    only feasible, untried points."""
    from harness.agent import families as fam_mod

    names = [f"k{i}" for i in range(10)]
    tpl = tmp_path / "kernels" / "moe_router" / "big.py.j2"
    tpl.parent.mkdir(parents=True)
    tpl.write_text("".join(f"{n.upper()} = {{{{ {n} }}}}\n" for n in names))
    (tpl.parent / "big.space.json").write_text(json.dumps(
        {"params": {n: [0, 1, 2, 3] for n in names}, "constraints": ["k0 + k1 <= 5"],
         "default": {n: 0 for n in names}}))
    fam = load_families("moe_router", tmp_path)[0]
    assert fam.size() == 4 ** 10 > fam_mod.ENUMERATE_MAX

    def refuse(self):
        raise AssertionError("enumerated")

    monkeypatch.setattr(fam_mod.Family, "iter_configs", refuse)
    target = {n: (i % 3) + 1 for i, n in enumerate(names)}                 # feasible: k0 + k1 = 3
    cost = lambda p: sum((p[n] - target[n]) ** 2 for n in names)        # noqa: E731
    search = HalvingSearch([fam], seed=5)
    scores: dict[str, float] = {}
    for r in range(1, 61):
        props = search.propose(8, scores, r)
        assert props and not {p.key for p in props} & set(scores)
        for p in props:
            assert p.params["k0"] + p.params["k1"] <= 5
            scores[p.key] = float(cost(p.params))
    best_key, best = search.best(scores)
    assert best == 0.0 and best_key == params_key(fam.name, target)
    assert len(scores) <= 480



def test_first_round_starts_around_a_known_point_and_never_proposes_it(tmp_path):
    from harness.agent.search import Proposal

    fam = _family(tmp_path)
    known = Proposal(fam.name, {"threads": 128, "vec": 4, "split_k": 7, "unroll": 2})
    search = HalvingSearch([fam], seed=3)
    props = search.propose(3, {}, 1, around=(known,))
    near = {params_key(fam.name, q) for q in fam.neighbours(known.params)}
    assert [p.key in near for p in props] == [True, True, False]     # ceil(3/2) neighbours, then the start
    assert props[2].params == fam.start()
    assert known.key not in {p.key for p in props}
    assert search.propose(3, {}, 1, around=(known,)) == props        # seeded: the same again
    stranger = Proposal("other_family", known.params)                 # a point of no listed family: ignored
    assert search.propose(3, {}, 1, around=(stranger,))[0].params == fam.start()
    # once something is scored the search runs on its own scores; the known point stays untried
    scores = {p.key: synthetic_cost(p.params) for p in props}
    assert known.key not in {p.key for p in search.propose(8, scores, 2, around=(known,))}
