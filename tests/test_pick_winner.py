"""scripts/gpu/pick_winner.py: which benchmarked candidate is worth a gate run."""
from __future__ import annotations

import importlib.util
import json
import lzma
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pw():
    spec = importlib.util.spec_from_file_location("pick_winner", ROOT / "scripts/gpu/pick_winner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rec(times: dict[str, list[float]]) -> dict:
    labels = {lb: {"id": lb.split(":")[1] + "000000"} for lb in times}
    n = len(next(iter(times.values())))
    rows = [{"times": {lb: {"median_us": t[i]} for lb, t in times.items()}} for i in range(n)]
    return {"candidates": labels, "rows": rows}


def test_the_best_geomean_wins_only_if_it_is_nowhere_slower(pw):
    rec = _rec({"f:inc": [10.0, 10.0], "f:fast": [8.0, 8.0], "f:mixed": [5.0, 11.0], "f:tie": [10.0, 9.9]})
    winner, lines = pw.pick(rec, "inc", min_geomean=1.05, max_slower=0.03)
    assert winner == "fast000000"                       # mixed has a better geomean but a slower row
    assert any(line.startswith("f:mixed") and "*" not in line for line in lines)
    assert pw.pick(rec, "inc", min_geomean=1.5)[0] is None
    with pytest.raises(SystemExit):
        pw.pick(rec, "nope")


def test_a_candidate_missing_a_row_is_not_picked(pw):
    rec = _rec({"f:inc": [10.0, 10.0], "f:fast": [5.0, 5.0]})
    del rec["rows"][1]["times"]["f:fast"]
    assert pw.pick(rec, "inc", min_geomean=1.0)[0] is None


def test_on_the_committed_session5_benchmarks(pw):
    """Back to back, the prefetching router looked like a winner; with separated calls it is not."""
    def load(name):
        return json.loads(lzma.open(ROOT / "results/h200/session5" / name).read())["ops"]["moe_router"]
    assert pw.pick(load("bench_router_pf.json.xz"), "ffcc5b")[0] == "fd8cb494bd2f"
    assert pw.pick(load("bench_router_separated.json.xz"), "ffcc5b")[0] is None


def test_on_the_committed_session6_benchmarks(pw):
    """The batch-dispatching hybrid clears the perf gate's 5% margin (the gate then measured
    1.059); the merge top-k alone sits on the margin; the row-split GEMM alone loses at small B."""
    def load(name):
        return json.loads(lzma.open(ROOT / "results/h200/session6" / name).read())["ops"]["moe_router"]
    assert pw.pick(load("bench_router_hybrid.json.xz"), "ffcc5b", min_geomean=1.05)[0] == "876e935cf35f"
    assert pw.pick(load("bench_router_rowsplit_k.json.xz"), "ffcc5b", min_geomean=1.0)[0] is None


def test_scope_points_project_the_geomean_over_the_whole_scope(pw):
    """Two measured points at 1.21x of a 4-point scope: 1.1x over the scope (the others at 1.0)."""
    rec = _rec({"f:inc": [12.1, 12.1], "f:fast": [10.0, 10.0]})
    assert pw.pick(rec, "inc", min_geomean=1.15)[0] == "fast000000"
    winner, lines = pw.pick(rec, "inc", min_geomean=1.15, scope_points=4)
    assert winner is None and "1.100 over 4 points" in lines[0]
    assert pw.pick(rec, "inc", min_geomean=1.09, scope_points=4)[0] == "fast000000"
    with pytest.raises(SystemExit):
        pw.pick(rec, "inc", scope_points=1)


def test_session19_mid_plan_falls_short_over_kda_scope(pw):
    """d5a02a wins its 16 measured points (1.044) but projects to 1.025 over kda's 28: no gate run."""
    rec = json.loads(lzma.open(ROOT / "results/h200/session19/bench_kda_mid.json.xz").read())["ops"]["kda_decode"]
    assert pw.pick(rec, "8d9661", min_geomean=1.04)[0] == "d5a02a202445"
    assert pw.pick(rec, "8d9661", min_geomean=1.04, scope_points=28)[0] is None


def test_per_shape_against_cublas_names_the_shapes_each_candidate_wins(pw):
    """Against the cuBLAS column: a shape counts for a candidate only where it is >= shape_min faster
    at every batch; shapes won at one TP only are named apart (a scope is TPs x shapes)."""
    def row(shape, tp, b, cublas, **cands):
        return {"shape": shape, "tp": tp, "batch": b,
                "times": {"cublas": {"median_us": cublas}, **{k: {"median_us": v} for k, v in cands.items()}}}
    rec = {"candidates": {"s:a": {"id": "aaa000000000"}, "s:b": {"id": "bbb000000000"}},
           "rows": [row("g1", 8, 1, 10.0, **{"s:a": 8.0, "s:b": 9.9}), row("g1", 8, 8, 10.0, **{"s:a": 9.0, "s:b": 9.0}),
                    row("g1", 16, 1, 10.0, **{"s:a": 8.0, "s:b": 8.0}), row("g1", 16, 8, 10.0, **{"s:a": 9.5, "s:b": 8.0}),
                    row("g2", 8, 1, 5.0, **{"s:a": 5.0, "s:b": 4.0}), row("g2", 16, 1, 5.0, **{"s:a": 6.0, "s:b": 4.0})]}
    lines, wins = pw.per_shape(rec, "cublas", 1.05)
    assert wins == {"s:a": {"g1": [8, 16]}, "s:b": {"g1": [16], "g2": [8, 16]}}
    assert lines[0].startswith("g1 TP8 (2 batches): s:a 1.111-1.250 *; s:b 1.010-1.111")
    scope = pw.scope_lines(rec, wins, [8, 16])
    assert scope == ["s:a (aaa000000000): every batch and TP at g1",
                     "s:b (bbb000000000): every batch and TP at g2; one TP only at g1@16"]
    assert pw.incumbent_column(rec, "aaa") == "s:a" and pw.incumbent_column(rec, "cublas") == "cublas"
    with pytest.raises(SystemExit, match="not in the benchmark"):
        pw.incumbent_column(rec, "cuDNN")


def test_propose_gives_each_won_shape_and_tp_its_best_candidate(pw):
    """Each (shape, TP) won at every batch goes to the winner with the best geomean there; a
    candidate's points become one entry per TP set, with its family, params and the batch range."""
    def row(shape, tp, b, cublas, **cands):
        return {"shape": shape, "tp": tp, "batch": b,
                "times": {"cublas": {"median_us": cublas}, **{k: {"median_us": v} for k, v in cands.items()}}}
    tpl = {"family": "fam", "params": {"warps": 8}}
    rec = {"candidates": {"s:a": {"id": "aaa000000000", "template": tpl},
                          "s:b": {"id": "bbb000000000", "template": {"family": "fam", "params": {"warps": 4}}}},
           "rows": [row("g1", 8, 1, 10.0, **{"s:a": 8.0, "s:b": 9.0}), row("g1", 8, 8, 10.0, **{"s:a": 8.0, "s:b": 9.0}),
                    row("g1", 16, 1, 10.0, **{"s:a": 9.0, "s:b": 8.0}), row("g1", 16, 8, 10.0, **{"s:a": 9.0, "s:b": 8.0}),
                    row("g2", 8, 1, 10.0, **{"s:a": 9.0, "s:b": 9.9}), row("g2", 8, 8, 10.0, **{"s:a": 9.0, "s:b": 9.9}),
                    row("g2", 16, 1, 10.0, **{"s:a": 9.0, "s:b": 9.9}), row("g2", 16, 8, 10.0, **{"s:a": 9.0, "s:b": 9.9}),
                    row("g3", 8, 1, 10.0, **{"s:a": 9.9, "s:b": 9.9}), row("g3", 8, 8, 10.0, **{"s:a": 9.9, "s:b": 9.9}),
                    row("skip", 8, 1, 10.0, **{"s:a": 5.0, "s:b": 9.9}), row("skip", 8, 8, 10.0, **{"s:a": 5.0, "s:b": 9.9})]}
    entries = pw.propose(rec, "skinny_gemm", "cublas", 1.05, exclude_shapes=("skip",))
    assert entries == [
        {"op": "skinny_gemm", "family": "fam", "label": "aaa000_cover_tp8", "params": {"warps": 8},
         "scope": {"tp": [8], "batch": [1, 8], "shapes": ["g1"]}},
        {"op": "skinny_gemm", "family": "fam", "label": "aaa000_cover_tp8_16", "params": {"warps": 8},
         "scope": {"batch": [1, 8], "shapes": ["g2"]}},
        {"op": "skinny_gemm", "family": "fam", "label": "bbb000_cover_tp16", "params": {"warps": 4},
         "scope": {"tp": [16], "batch": [1, 8], "shapes": ["g1"]}}]
    assert entries[0]["params"] is not tpl["params"]           # a copy, not the bench record's dict
    assert pw.propose(rec, "skinny_gemm", "cublas", 2.5) == []                  # "skip" alone is 2x
    # "shape@tp" leaves one TP out: g1 at TP16 (s:b's only win) goes, g1 at TP8 stays with s:a
    one_tp = pw.propose(rec, "skinny_gemm", "cublas", 1.05, exclude_shapes=("skip", "g1@16"))
    assert [(e["label"], e["scope"]) for e in one_tp] == [
        ("aaa000_cover_tp8", {"tp": [8], "batch": [1, 8], "shapes": ["g1"]}),
        ("aaa000_cover_tp8_16", {"batch": [1, 8], "shapes": ["g2"]})]


def test_propose_on_session33_reproduces_268009s_promoted_scope(pw):
    """Against cuBLAS in session 33's whole-family run, the kernel later promoted wins exactly the
    three shapes its scope declares, at both TPs and B 1..8."""
    rec = json.loads(lzma.open(ROOT / "results/h200/session33/bench_skinny33.json.xz").read())["ops"]["skinny_gemm"]
    entries = pw.propose(rec, "skinny_gemm", "cublas")
    assert [(e["label"], e["scope"]) for e in entries] == [
        ("268009_cover_tp8_16", {"batch": [1, 8], "shapes": ["latent_down", "latent_up", "mla_qkv_a"]})]
    promoted = json.loads((ROOT / "kernels_generated/skinny_gemm/268009f21621/candidate.json").read_text())
    assert entries[0]["params"] == promoted["provenance"]["template"]["params"]
    assert set(entries[0]["scope"]["shapes"]) == set(promoted["scope"]["shapes"])


def test_propose_needs_per_shape_on_the_command_line(tmp_path):
    import subprocess
    import sys
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps({"ops": {"skinny_gemm": {"candidates": {}, "rows": []}}}))
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/pick_winner.py"), str(bench), "skinny_gemm",
                        "cublas", "--propose"], capture_output=True, text=True)
    assert r.returncode != 0 and "--propose goes with --per-shape" in r.stderr


def _session33_entries(pw) -> list[dict]:
    rec = json.loads(lzma.open(ROOT / "results/h200/session33/bench_skinny33.json.xz").read())["ops"]["skinny_gemm"]
    return pw.propose(rec, "skinny_gemm", "cublas")


def test_written_entries_render_to_the_benchmarked_kernel(pw, tmp_path):
    """--write appends what render_human.py renders: session 33's proposal renders to 268009's very
    id (the same kernel.py under the same scope). A second write adds nothing."""
    from harness.agent.families import load_family
    from harness.toolchain.candidate import Scope, candidate_id

    hc = tmp_path / "human_candidates.json"
    hc.write_text((ROOT / "prompts/kernels/human_candidates.json").read_text())
    n0 = len(json.loads(hc.read_text())["candidates"])
    entries = _session33_entries(pw)
    assert pw.write_entries(hc, entries) == ["268009_cover_tp8_16"]
    doc = json.loads(hc.read_text())
    assert len(doc["candidates"]) == n0 + 1 and doc["candidates"][-1] == entries[0]
    fam = load_family(ROOT / "prompts/kernels/skinny_gemm/swapab.py.j2", "skinny_gemm")
    spec = importlib.util.spec_from_file_location("render_human", ROOT / "prompts/kernels/render_human.py")
    rh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rh)
    scope = Scope.from_json(rh.point_scope(fam.scope, doc["candidates"][-1]))
    assert candidate_id(fam.render(entries[0]["params"]), scope) == "268009f21621"
    assert pw.write_entries(hc, entries) == []
    assert len(json.loads(hc.read_text())["candidates"]) == n0 + 1


def test_write_refuses_entries_that_would_not_render_and_writes_nothing(pw, tmp_path):
    hc = tmp_path / "human_candidates.json"
    hc.write_text((ROOT / "prompts/kernels/human_candidates.json").read_text())
    good = _session33_entries(pw)[0]
    outside = {**good, "label": "x1", "params": {**good["params"], "alt_shapes": "kda_in_proj,mla_q_b"}}
    wide = {**good, "label": "x2", "scope": {"batch": [1, 8], "shapes": ["latent_down", "no_such_gemm"]}}
    clash = {**good, "params": {**good["params"], "warps": 4}}
    pw.write_entries(hc, [good])
    before = hc.read_text()
    fine = {**good, "label": "x0"}                     # would be added, but comes with a bad one
    for bad, why in ((outside, "outside swapab.space.json"), (wide, "does not narrow"), (clash, "already holds a different")):
        with pytest.raises(SystemExit, match=why):
            pw.write_entries(hc, [fine, bad])
        assert hc.read_text() == before


def test_a_study_outside_the_space_is_never_proposed(pw):
    """Session 51's H100 cover bench: a4310c (a render_variant.py --outside-space study, its ALT
    plan on all ten shapes) wins mla_g_proj at both TPs, but only a candidate inside swapab's space
    can be written; its points go to the best of the others (ee9e38 at TP8, aa998e at TP16)."""
    rec = json.loads((ROOT / "results/h100/session51/bench_cover_skinny.json").read_text())["ops"]["skinny_gemm"]
    studies = pw.outside_space(rec, "skinny_gemm")
    assert studies == {"swapab:a4310c": "swapab"}
    speedups = pw.shape_speedups(rec, "cublas")
    assert max(pw.geomean(r) for lb, r in speedups[("mla_g_proj", 16)][1].items() if r) == pytest.approx(
        pw.geomean(speedups[("mla_g_proj", 16)][1]["swapab:a4310c"]))
    naive = pw.propose(rec, "skinny_gemm", "cublas", exclude_shapes=("shared_gate_up",))
    assert any(e["label"].startswith("a4310c") for e in naive)
    entries = pw.propose(rec, "skinny_gemm", "cublas", exclude_shapes=("shared_gate_up",),
                         exclude_labels=frozenset(studies))
    assert not any(e["label"].startswith("a4310c") for e in entries)
    at = {(s, t): e["label"][:6] for e in entries for s in e["scope"]["shapes"] for t in e["scope"].get("tp", [8, 16])}
    assert at[("mla_g_proj", 8)] == "ee9e38" and at[("mla_g_proj", 16)] == "aa998e"
    assert set(at) == {k for e in naive for k in
                       ((s, t) for s in e["scope"]["shapes"] for t in e["scope"].get("tp", [8, 16]))}


def test_propose_on_the_command_line_names_the_study_it_left_out(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/pick_winner.py"),
                        str(ROOT / "results/h100/session51/bench_cover_skinny.json"), "skinny_gemm", "cublas",
                        "--per-shape", "--propose", "--exclude-shapes", "shared_gate_up"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "swapab:a4310c (a4310c441db5): outside swapab.space.json, not proposed (it wins " in r.stderr
    assert "mla_g_proj@8/16" in r.stderr
    assert [e["label"] for e in json.loads(r.stdout)] == [
        "714b8a_cover_tp8", "714b8a_cover_tp16", "aa998e_cover_tp8_16", "aa998e_cover_tp16",
        "ee9e38_cover_tp8", "ee9e38_cover_tp8_16", "ee9e38_cover_tp16"]
