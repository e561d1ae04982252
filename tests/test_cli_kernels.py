"""`harness check / compile / eval` (harness/cli_kernels.py): the bad-input contract (one line
on stderr, exit 2, no traceback), checked before anything compiles."""
from __future__ import annotations

import json

import pytest

import harness.toolchain as toolchain

OP = "moe_router"


def _promoted(op: str) -> str:
    from harness import paths

    return next(e["candidate"] for e in json.loads(paths.promoted_manifest().read_text()) if e["op"] == op)


@pytest.fixture
def no_work(monkeypatch):
    """Nothing compiles or runs: a bad option must be refused before that."""
    def refuse(*a, **k):
        raise AssertionError("compiled or evaluated despite a bad option")
    monkeypatch.setattr(toolchain, "compile_matrix", refuse)
    monkeypatch.setattr(toolchain, "evaluate_candidate", refuse)


@pytest.mark.parametrize("argv", [
    ["compile", OP, "{cid}", "--tp", "7"],
    ["compile", OP, "{cid}", "--tp", "8,12", "--json"],
    ["compile", OP, "{cid}", "--timeout-s", "0"],
    ["compile", OP, "{cid}", "--timeout-s", "-1"],
    ["eval", OP, "{cid}", "--sets", "0"],
    ["eval", OP, "{cid}", "--sets", "-3", "--json"],
    ["eval", OP, "{cid}", "--timeout-s", "0"],
])
def test_bad_numeric_option_is_one_line_exit_2(argv: list[str], run_cli, no_work) -> None:
    code, out, err = run_cli([a.format(cid=_promoted(OP)) for a in argv])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:"), err
    named = "TP " if argv[3] == "--tp" else argv[3]   # the line names what was wrong
    assert named in lines[0], err


@pytest.mark.parametrize("verb", ["check", "compile", "eval"])
def test_an_empty_candidate_id_is_named_as_such(verb: str, run_cli, no_work) -> None:
    code, out, err = run_cli([verb, OP, " "])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "empty candidate id" in lines[0], err


# ---- the tables name each row's state dtype / GEMM shape where the op has them ----------------------
def _compile_rep(op: str, arch: str, tp: int, static: dict):
    from harness.toolchain.compile import CompileReport
    from harness.toolchain.verdict import Verdict

    return CompileReport(op=op, candidate_id="c0ffee", arch=arch, tp=tp, static=static, verdict=Verdict.OK,
                         message="compiled", compile_s=1.0, max_registers=96)


def _table_rows(out: str) -> list[list[str]]:
    """The cells of each row of the rich tables in `out` (header rows included)."""
    return [[c.strip() for c in ln.strip().strip("│┃").split("│" if "│" in ln else "┃")]
            for ln in out.splitlines() if ln.strip().startswith(("│", "┃"))]


@pytest.mark.parametrize("op,key,values,column", [
    ("kda_decode", "state_dtype", ["fp32", "bf16"], "state dtype"),
    ("skinny_gemm", "shape", ["latent_down", "latent_up", "mla_qkv_a"], "shape"),
    ("gemm_situ_and_mul", "shape", ["shared_gate_up", "dense_gate_up"], "shape"),
])
def test_compile_table_names_each_rows_static_key(op, key, values, column, run_cli, monkeypatch) -> None:
    reps = [_compile_rep(op, a, 8, {key: v}) for a in ("sm_90a", "sm_103a") for v in values]
    monkeypatch.setattr(toolchain, "compile_matrix", lambda *a, **kw: reps)
    code, out, err = run_cli(["compile", op, _promoted(op)])
    assert code == 0, err
    rows = _table_rows(out)
    assert rows[0][:3] == ["arch", "TP", column], rows[0]
    assert [r[:3] for r in rows[1:]] == [[a, "8", v] for a in ("sm_90a", "sm_103a") for v in values]
    assert len({tuple(r[:3]) for r in rows[1:]}) == len(reps)          # no row looks like another
    code, out, _ = run_cli(["compile", op, _promoted(op), "--json"])    # the JSON carried it already
    assert [c["static"][key] for c in json.loads(out)["compiles"]] == [r.static[key] for r in reps]


def test_compile_table_of_an_op_without_static_keys_is_unchanged(run_cli, monkeypatch) -> None:
    reps = [_compile_rep(OP, a, tp, {}) for a in ("sm_90a", "sm_103a") for tp in (8, 16)]
    monkeypatch.setattr(toolchain, "compile_matrix", lambda *a, **kw: reps)
    code, out, err = run_cli(["compile", OP, _promoted(OP)])
    assert code == 0, err
    assert _table_rows(out)[0] == ["arch", "TP", "verdict", "compile s", "wall s", "cache", "regs", "spill B",
                                   "128-bit loads"]


def _eval_report(op: str, points: list[dict]):
    from harness.toolchain.evaluate import EvalReport, PointResult
    from harness.toolchain.static_check import StaticReport
    from harness.toolchain.verdict import Verdict

    pts = [PointResult(label="", batch=p["batch"], tp=8, verdict=Verdict.OK, message="", n_input_sets=10,
                       timing_us={"kernel": {"median_us": 2.0, "spread_pct": 1.0}, "reference": {"median_us": 8.0}},
                       speedup_vs_reference=4.0, state_dtype=p.get("state_dtype", "fp32"), shape=p.get("shape", ""))
           for p in points]
    for pr in pts:
        pr.label = pr.point().label()                   # as the worker writes it (opdef.Point.label)
    return EvalReport(op, "c0ffee", Verdict.OK, f"{len(pts)} points correct", StaticReport(True, []),
                      gpu_run=True, gpu="H200", arch="sm_90a", points=pts)


def test_eval_table_has_a_state_dtype_column_for_kda(run_cli, monkeypatch) -> None:
    pts = [{"batch": b, "state_dtype": s} for b in (1, 64) for s in ("fp32", "bf16")]
    monkeypatch.setattr(toolchain, "evaluate_candidate", lambda *a, **kw: _eval_report("kda_decode", pts))
    code, out, err = run_cli(["eval", "kda_decode", _promoted("kda_decode"), "--batch", "1,64",
                              "--state-dtype", "fp32,bf16"])
    assert code == 0, err
    rows = [r for r in _table_rows(out) if r[0] == "point" or r[0].startswith("B=")]
    assert rows[0][:3] == ["point", "state dtype", "verdict"], rows[0]
    assert [r[:2] for r in rows[1:]] == [["B=1 TP8", "fp32"], ["B=1 TP8", "bf16"], ["B=64 TP8", "fp32"],
                                         ["B=64 TP8", "bf16"]]


def test_eval_table_has_a_shape_column_for_the_gemms(run_cli, monkeypatch) -> None:
    pts = [{"batch": 1, "shape": s} for s in ("latent_down", "mla_qkv_a")] + [{"batch": 8}]
    monkeypatch.setattr(toolchain, "evaluate_candidate", lambda *a, **kw: _eval_report("skinny_gemm", pts))
    code, out, err = run_cli(["eval", "skinny_gemm", _promoted("skinny_gemm"), "--batch", "1"])
    assert code == 0, err
    rows = [r for r in _table_rows(out) if r[0] == "point" or r[0].startswith("B=")]
    assert rows[0][:3] == ["point", "shape", "verdict"], rows[0]
    assert [r[:2] for r in rows[1:]] == [["B=1 TP8", "latent_down"], ["B=1 TP8", "mla_qkv_a"],
                                         ["B=8 TP8", "(default)"]]


def test_eval_table_of_an_op_without_static_keys_is_unchanged(run_cli, monkeypatch) -> None:
    monkeypatch.setattr(toolchain, "evaluate_candidate", lambda *a, **kw: _eval_report(OP, [{"batch": 1}]))
    code, out, err = run_cli(["eval", OP, _promoted(OP), "--batch", "1"])
    assert code == 0, err
    rows = [r for r in _table_rows(out) if r[0] == "point" or r[0].startswith("B=")]
    assert rows[0][:3] == ["point", "verdict", "sets"] and rows[1][:2] == ["B=1 TP8", "OK"]


def test_eval_vs_promoted_times_each_point_against_the_kernel_that_runs_it(run_cli, monkeypatch) -> None:
    """`--vs promoted` passes the op's promoted kernels in try order (skinny_gemm: the narrow
    mla_qkv_a kernel first) and the table names the one timed at each point."""
    from harness import paths
    from harness.promotion import kernel_entries, read_manifest
    from harness.toolchain.candidate import load_candidate

    # the promoted kernels in try order that declare B=1 at either evaluated shape (since session 51
    # skinny_gemm also holds narrow kernels at shapes this eval does not touch: those are not timed)
    entries = kernel_entries(read_manifest(paths.root()))["skinny_gemm"]
    order = [k.candidate for k in entries if {"mla_qkv_a", "latent_down"} & set(k.scope.shapes)
             and k.scope.batch[0] <= 1]
    assert len(order) == 2 and len(entries) > len(order)
    draft = next(c.id for c in toolchain.list_candidates("skinny_gemm") if c.id not in order
                 and set(c.scope.shapes) == {"latent_down", "latent_up", "mla_qkv_a"})
    seen: dict = {}

    def fake_eval(cand, points, **kw):                  # the GPU worker cannot run here
        seen["incumbent"] = [c.id for c in kw["incumbent"]]
        rep = _eval_report("skinny_gemm", [{"batch": 1, "shape": s} for s in ("mla_qkv_a", "latent_down")])
        for pr, inc in zip(rep.points, order):
            pr.timing_us["incumbent"] = {"median_us": 2.2}
            pr.speedup_vs_incumbent, pr.incumbent_id = 1.1, inc
        rep.incumbent_id = ",".join(order)
        return rep

    monkeypatch.setattr(toolchain, "evaluate_candidate", fake_eval)
    code, out, err = run_cli(["eval", "skinny_gemm", draft, "--batch", "1", "--shape", "mla_qkv_a,latent_down",
                              "--vs", "promoted"])
    assert code == 0, err
    assert seen["incumbent"] == order
    rows = [r for r in _table_rows(out) if r[0] == "point" or r[0].startswith("B=")]
    col = rows[0].index("promoted")
    assert [r[1] for r in rows[1:]] == ["mla_qkv_a", "latent_down"]
    assert [r[col] for r in rows[1:]] == [i[:6] for i in order]
    assert load_candidate("skinny_gemm", order[0]).scope.shapes == ("mla_qkv_a",)


def test_eval_warns_where_the_timing_spread_is_high(run_cli, monkeypatch) -> None:
    """A kernel whose samples spread past 3% (session 36: the eager reference in the kernels'
    interleave read 4-7%) gets a warning line naming the point; a quiet point does not."""
    def fake_eval(cand, points, **kw):
        rep = _eval_report(OP, [{"batch": 1}, {"batch": 8}])
        rep.points[1].timing_us["kernel"]["spread_pct"] = 6.4
        return rep

    monkeypatch.setattr(toolchain, "evaluate_candidate", fake_eval)
    code, out, err = run_cli(["eval", OP, _promoted(OP), "--batch", "1,8"])
    assert code == 0, err
    warn = [ln for ln in out.splitlines() if "timing spread above 3%" in ln]
    assert len(warn) == 1 and "B=8 TP8" in warn[0] and "B=1 TP8" not in warn[0], out


def test_eval_vs_promoted_without_a_covering_kernel_is_one_line_exit_2(run_cli, no_work) -> None:
    code, out, err = run_cli(["eval", OP, _promoted(OP), "--batch", "1", "--vs", "promoted"])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--vs promoted: no promoted moe_router kernel other than" in lines[0], err


# ---- `harness eval` compiles the points it evaluates, not the whole scope -----------------------------
@pytest.fixture
def compiled(monkeypatch) -> list[tuple]:
    """Records each (arch, TP, static key) compile instead of running it (no GPU: eval stops after)."""
    import harness.toolchain.compile as tc
    import harness.toolchain.evaluate as ev

    seen: list[tuple] = []

    def fake_compile_many(cand, combos, **kw):
        seen.extend((a, tp, tuple(sorted(st.items()))) for a, tp, st in combos)
        return [_compile_rep(cand.op, a, tp, st) for a, tp, st in combos]
    monkeypatch.setattr(tc, "compile_many", fake_compile_many)       # under compile_matrix
    monkeypatch.setattr(ev, "compile_many", fake_compile_many, raising=False)
    monkeypatch.setattr(ev, "gpu_available", lambda: False)
    return seen


def test_eval_of_one_shape_compiles_only_that_shape(run_cli, compiled) -> None:
    code, _, err = run_cli(["eval", "skinny_gemm", _promoted("skinny_gemm"), "--shape", "mla_qkv_a", "--batch", "1,8"])
    assert code == 3, err                                          # no GPU here: compiled, NOT_RUN
    assert compiled == [(a, 8, (("shape", "mla_qkv_a"),)) for a in ("sm_90a", "sm_103a")]


def test_eval_of_one_state_dtype_compiles_only_that_state_dtype(run_cli, compiled) -> None:
    code, _, err = run_cli(["eval", "kda_decode", _promoted("kda_decode"), "--state-dtype", "bf16", "--tp", "8,16"])
    assert code == 3, err
    assert compiled == [(a, tp, (("state_dtype", "bf16"),)) for a in ("sm_90a", "sm_103a") for tp in (8, 16)]


def test_compile_plan_follows_the_points() -> None:
    from harness.opdef import Point
    from harness.toolchain import load_candidate
    from harness.toolchain.evaluate import compile_plan

    kda = load_candidate("kda_decode", _promoted("kda_decode"))
    pts = [Point(batch=b, tp=tp, state_dtype=s) for tp in (16, 8) for b in (1, 64) for s in ("bf16", "fp32")]
    assert compile_plan(kda, pts, ["sm_90a"]) == [("sm_90a", 8, {"state_dtype": "bf16"}),
                                                  ("sm_90a", 8, {"state_dtype": "fp32"}),
                                                  ("sm_90a", 16, {"state_dtype": "bf16"}),
                                                  ("sm_90a", 16, {"state_dtype": "fp32"})]
    # without points: the scope's whole matrix, as compile_matrix builds it
    assert len(compile_plan(kda, [])) == len(kda.scope.archs) * len(kda.scope.tp) * 2
