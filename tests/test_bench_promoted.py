"""scripts/gpu/bench_promoted.py: the commands it derives from the manifest, and how it runs them
(the benchmarks themselves need a GPU)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_scripts import gpu_script

import reference_impls
from harness.opdef import Point

ROOT = Path(__file__).resolve().parents[1]
SWEEP = (1, 2, 4, 8, 16, 32, 64)


@pytest.fixture(scope="module")
def bp():
    return gpu_script("bench_promoted")


@pytest.fixture(scope="module")
def bench():
    return gpu_script("bench_kernels")


def _arg(argv: list[str], flag: str) -> list[str]:
    return argv[argv.index(flag) + 1].split(",") if flag in argv else []


def _scope_points(e: dict) -> set[tuple]:
    """(tp, batch, shape, state dtype) of an entry's scope on the sweep's batches: the oracle, read
    from the manifest's JSON."""
    s, defn = e["scope"], reference_impls.get(e["op"])
    names = list(defn.extra.get("shape_names", ()))
    shapes = s["shapes"] or names or [""]
    dtypes = (s["state_dtypes"] or list(defn.state_dtypes)) if len(defn.state_dtypes) > 1 else [""]
    return {(tp, b, sh, sd) for tp in s["tp"] for b in SWEEP if s["batch"][0] <= b <= s["batch"][1]
            for sh in shapes for sd in dtypes}


def test_the_plan_times_every_promoted_kernel_at_every_point_of_its_scope(bp, bench):
    entries = json.loads((ROOT / "kernels_generated" / "promoted.json").read_text())
    steps = bp.plan(entries)
    assert [s.name for s in steps] == ["small", "router", "gemm", "skinny", "layers k3-tp8-rank", "layers k3-tp16-rank"]
    for e in entries:
        [step] = [s for s in steps if e["op"] in _arg(s.argv, "--ops")]
        assert any(e["candidate"].startswith(c) for c in _arg(step.argv, "--candidates")), e["candidate"]
        defn = reference_impls.get(e["op"])
        points = bench.op_points(defn, [int(b) for b in _arg(step.argv, "--batches")],
                                 [int(t) for t in _arg(step.argv, "--tps")], _arg(step.argv, "--shapes"),
                                 _arg(step.argv, "--state-dtypes"))
        timed = {(p.tp, p.batch, p.shape, p.state_dtype if len(defn.state_dtypes) > 1 else "") for p in points}
        assert _scope_points(e) <= timed, (e["op"], e["candidate"], sorted(_scope_points(e) - timed)[:4])
    skinny = next(s for s in steps if s.name == "skinny")
    # the sweep's batches inside some promoted skinny kernel's scope: de0cb2 (session 65) covers B 1..64
    ends = {e["scope"]["batch"][1] for e in entries if e["op"] == "skinny_gemm"}
    assert _arg(skinny.argv, "--batches") == (["1", "2", "4", "8", "16", "32", "64"] if 64 in ends
                                               else ["1", "2", "4", "8"])
    assert skinny.keep_as == "bench_promoted_skinny.json" and skinny.writes == "bench_kernels_skinny_gemm.json"


def test_only_picks_steps_and_an_op_without_a_promoted_kernel_has_none(bp):
    entries = json.loads((ROOT / "kernels_generated" / "promoted.json").read_text())
    assert [s.name for s in bp.plan(entries, ("router", "layers"))] == ["router", "layers k3-tp8-rank",
                                                                        "layers k3-tp16-rank"]
    assert bp.plan([e for e in entries if e["op"] != "moe_router"], ("router",)) == []


def test_the_command_line_plans_refuses_unknown_steps_and_needs_out(tmp_path):
    run = lambda *a, env=None: subprocess.run([sys.executable, str(ROOT / "scripts/gpu/bench_promoted.py"), *a],  # noqa: E731
                                              capture_output=True, text=True, cwd=ROOT, env=env)
    p = run("--plan", "--json", "--only", "gemm")
    [step] = json.loads(p.stdout)
    assert p.returncode == 0 and step["name"] == "gemm" and "--candidates" in step["argv"]
    p = run("--only", "gemm,nope")
    assert p.returncode == 2 and "unknown step(s) nope" in p.stderr and "Traceback" not in p.stderr
    p = run("--only", "gemm", env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "set OUT" in p.stderr


def test_each_step_runs_under_its_own_limit_and_keeps_what_it_wrote(bp, tmp_path):
    """A step cut off by its limit counts as failed and the next still runs; a step's JSON is kept
    under the name the scorecard's readers see in results/ (bench_promoted_<step>.json)."""
    write = f"open({str(tmp_path / 'bench_kernels_x.json')!r}, 'w').write('{{}}')"
    steps = [bp.Step("slow", [sys.executable, "-c", "import time; time.sleep(30)"], 1, "none.json", "bench_promoted_slow.json"),
             bp.Step("x", [sys.executable, "-c", write], 30, "bench_kernels_x.json", "bench_promoted_x.json")]
    assert bp.run(steps, tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_promoted_slow.log", "bench_promoted_x.json",
                                                          "bench_promoted_x.log"]


def test_skip_points_leaves_out_one_shape_at_one_tp(bench):
    """bench_kernels.py --skip-points (a cover bench's points a promoted kernel already runs): the
    named shape@tp goes, the same shape at the other TP stays; a bad entry is a one-line error."""
    defn = reference_impls.get("skinny_gemm")
    skip = bench.parse_skip_points("kda_o_proj@16,mla_q_b@16")
    points = bench.op_points(defn, [1, 8], [8, 16], ["kda_o_proj", "mla_q_b", "dense_down"], [], skip)
    assert {(p.shape, p.tp) for p in points} == {("kda_o_proj", 8), ("mla_q_b", 8), ("dense_down", 8),
                                                  ("dense_down", 16)}
    assert len(points) == 8                                             # each at B 1 and 8
    for bad in ("kda_o_proj", "nope@8", "kda_o_proj@x"):
        with pytest.raises(SystemExit, match="shape@tp entries of known shapes"):
            bench.parse_skip_points(bad)


def test_with_times_a_candidate_that_is_not_promoted_at_its_declared_scope(bp):
    """`--with OP/ID`: a replacement gated in the same device session (b01a64, d4747b's midpipe
    replacement, before it is promoted) is timed beside the promoted kernels, at the scope its
    candidate.json declares; a bad entry is a one-line error."""
    meta = json.loads((ROOT / "kernels_generated/skinny_gemm/b01a64700952/candidate.json").read_text())
    entries = [e for e in json.loads((ROOT / "kernels_generated" / "promoted.json").read_text())
               if e["candidate"] != meta["id"]]                      # the manifest as it was before
    [extra] = bp.with_entries("skinny_gemm/b01a64700952")
    assert extra == {"op": "skinny_gemm", "candidate": meta["id"], "scope": meta["scope"]}
    assert not any("b01a64700952" in c for s in bp.plan(entries, ("skinny",)) for c in _arg(s.argv, "--candidates"))
    [skinny] = bp.plan(entries + [extra], ("skinny",))
    assert "b01a64700952" in _arg(skinny.argv, "--candidates") and "dense_down" in _arg(skinny.argv, "--shapes")
    for bad in ("skinny_gemm/nope", "b01a64700952", "skinny_gemm/"):
        with pytest.raises(SystemExit, match="no candidate"):
            bp.with_entries(bad)
    p = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/bench_promoted.py"), "--plan", "--with", "x/y"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 1 and "--with x/y: no candidate" in p.stderr and "Traceback" not in p.stderr
