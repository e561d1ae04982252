"""scripts/gpu/bench_kernels.py point enumeration and scope filter (the CPU-checkable part)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import reference_impls
from harness.opdef import Point

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_kernels", ROOT / "scripts/gpu/bench_kernels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_points_span_shapes_and_state_dtypes(bench):
    gemm = reference_impls.get("skinny_gemm")
    pts = bench.op_points(gemm, [1, 8], [8, 16], ["latent_down", "kda_in_proj"], ["fp32"])
    assert {(p.tp, p.shape, p.batch) for p in pts} == {(tp, s, b) for tp in (8, 16)
                                                        for s in ("latent_down", "kda_in_proj") for b in (1, 8)}
    assert len(bench.op_points(gemm, [1], [8], ["all"], [])) == len(gemm.extra["shape_names"])
    with pytest.raises(SystemExit, match="unknown shape"):
        bench.op_points(gemm, [1], [8], ["nope"], [])
    kda = reference_impls.get("kda_decode")
    pts = bench.op_points(kda, [4], [8], [], ["fp32", "bf16"])
    assert sorted(p.state_dtype for p in pts) == ["bf16", "fp32"] and all(p.shape == "" for p in pts)
    # ops with one state dtype and no shapes: just TP x B
    assert len(bench.op_points(reference_impls.get("add_rmsnorm"), [1, 2], [8], ["latent_down"], ["bf16"])) == 2


def test_scope_filter(bench):
    cand = {"scope": {"tp": [8], "batch": [1, 8], "shapes": ["latent_down"], "state_dtypes": []}}
    assert bench.in_scope(cand, Point(batch=8, tp=8, shape="latent_down"))
    assert not bench.in_scope(cand, Point(batch=9, tp=8, shape="latent_down"))
    assert not bench.in_scope(cand, Point(batch=1, tp=16, shape="latent_down"))
    assert not bench.in_scope(cand, Point(batch=1, tp=8, shape="kda_in_proj"))
    kda = {"scope": {"tp": [8, 16], "batch": [1, 64], "state_dtypes": ["fp32"]}}
    assert bench.in_scope(kda, Point(batch=64, tp=16, state_dtype="fp32"))
    assert not bench.in_scope(kda, Point(batch=64, tp=16, state_dtype="bf16"))


def test_attn_res_points_default_nb8_and_named(bench):
    ar = reference_impls.get("attn_res")
    assert {p.shape for p in bench.op_points(ar, [1, 64], [8], [], [])} == {"nb8"}     # the worst case
    pts = bench.op_points(ar, [1], [8, 16], ["nb1", "nb4", "nb8"], [])
    assert sorted((p.tp, p.shape) for p in pts) == [(tp, f"nb{n}") for tp in (8, 16) for n in (1, 4, 8)]
    assert [ar.shapes(p)["blocks"][1] for p in pts[:3]] == [1, 4, 8]
    assert len(bench.op_points(ar, [1], [8], ["all"], [])) == 8
    # one --shapes list for several ops: each op takes its own names, else its default
    gemm = reference_impls.get("skinny_gemm")
    mixed = ["latent_down", "nb1"]
    assert [p.shape for p in bench.op_points(ar, [1], [8], mixed, [])] == ["nb1"]
    assert [p.shape for p in bench.op_points(gemm, [1], [8], mixed, [])] == ["latent_down"]
    assert [p.shape for p in bench.op_points(gemm, [1], [8], ["nb1", "nb4"], [])] == ["latent_down"]
    with pytest.raises(SystemExit, match="unknown shape"):
        bench.op_points(ar, [1], [8], ["nb9"], [])


def test_attn_res_scope_filter_and_static_key(bench):
    import json

    metas = sorted((ROOT / "kernels_generated/attn_res").glob("*/candidate.json"))
    cands = [json.loads(m.read_text()) for m in metas]
    assert cands and all(c["scope"]["shapes"] == [f"nb{n}" for n in range(1, 9)] for c in cands)
    ar = reference_impls.get("attn_res")
    for p in bench.op_points(ar, [1, 64], [8, 16], ["nb1", "nb4", "nb8"], []):
        assert all(bench.in_scope(c, p) for c in cands)
        assert bench.static_for(ar, p) == {"shape": p.shape}
    assert not bench.in_scope(cands[0], Point(batch=1, tp=8, shape="nb9"))


def test_static_verdict_flags_what_the_static_gate_refuses(bench, tmp_path):
    ok_dir = ROOT / "kernels_generated/moe_router/ffcc5bb693af"
    assert bench.static_verdict("moe_router", str(ok_dir)) == "ok"
    bad = tmp_path / "bad"
    bad.mkdir()
    import json

    from harness.toolchain.candidate import Scope, candidate_id

    meta = json.loads((ok_dir / "candidate.json").read_text())
    src = (ok_dir / "kernel.py").read_text().replace("import torch\n", "import torch\nimport reference_impls\n", 1)
    meta["id"] = candidate_id(src, Scope.from_json(meta["scope"]))     # a valid candidate, just unpromotable
    (bad / "kernel.py").write_text(src)
    (bad / "candidate.json").write_text(json.dumps(meta))
    verdict = bench.static_verdict("moe_router", str(bad))
    assert verdict.startswith("REJECT") and "reference_impls" in verdict


def test_table_adds_floor_plus_launch_when_measured(bench, capsys):
    rec = {"op": "add_rmsnorm", "candidates": {"rowreg:aa": {"id": "aa", "check": {"p": {"ok": True}}}},
           "rows": [{"tp": 8, "batch": 64, "floor_us": 0.9,
                     "times": {"eager": {"median_us": 46.0}, "compile": {"median_us": 4.8},
                               "rowreg:aa": {"median_us": 3.0}}}]}
    bench.print_table(rec, launch_us=1.1)
    lines = capsys.readouterr().out.splitlines()
    hdr, row = lines[2].split("|"), lines[3].split("|")
    cell = dict(zip((h.strip() for h in hdr), (c.strip() for c in row)))
    assert cell["floor+launch"] == "2.00" and cell["best/(fl+ln)"] == "1.50" and cell["best %floor"] == "30.00"
    assert cell["best vs compile"] == "1.60" and "launch = 1.10 us" in lines[1]
    bench.print_table(rec)                                   # without it: the columns only
    out = capsys.readouterr().out
    assert "floor+launch" not in out and "best %floor" in out and "B*" not in out


def test_copy_yardstick_moves_the_floors_bytes(bench):
    assert bench.copy_elems(100_000) * 8 == 100_000           # 12,500 fp32 read + written = the op's bytes
    assert bench.copy_elems(100_004) == 12_500                 # rounded down to whole elements
    assert bench.copy_elems(3) == 1                            # never an empty copy


def test_table_adds_the_copy_column_when_timed(bench, capsys):
    rec = {"op": "add_rmsnorm", "candidates": {"rowreg:aa": {"id": "aa", "check": {"p": {"ok": True}}}},
           "rows": [{"tp": 8, "batch": 64, "floor_us": 0.9,
                     "times": {"eager": {"median_us": 46.0}, "compile": {"median_us": 4.8},
                               "rowreg:aa": {"median_us": 3.0}, bench.COPY: {"median_us": 2.4}}}]}
    bench.print_table(rec, launch_us=1.1)
    lines = capsys.readouterr().out.splitlines()
    cell = dict(zip((h.strip() for h in lines[2].split("|")), (c.strip() for c in lines[3].split("|"))))
    assert cell["copy"] == "2.40" and cell["best/copy"] == "1.25" and "copy = an elementwise SM kernel" in lines[1]
    assert "copy" not in rec["candidates"]                     # a yardstick, not a candidate column twice
    assert lines[2].count("copy") == 2
    del rec["rows"][0]["times"][bench.COPY]
    bench.print_table(rec, launch_us=1.1)
    assert "best/copy" not in capsys.readouterr().out


def test_max_copies_rotates_the_small_ops_past_l2(bench):
    """--max-copies 4096 covers every point of add_rmsnorm, attn_res and kda_decode (3 x L2 of
    inputs), where the default 64 copies leave their small points partly in L2."""
    l2_rotation = bench.timing.L2_ROTATION_FACTOR * bench.L2_BYTES
    for op in ("add_rmsnorm", "attn_res", "kda_decode"):
        defn = reference_impls.get(op)
        for point in bench.op_points(defn, [1, 2, 4, 8, 16, 32, 64], [8, 16], ["all"], ["fp32", "bf16"]):
            mb = defn.min_bytes(point)
            assert bench.rotation_count(mb, 4096) * mb >= l2_rotation, (op, point)
            assert bench.rotation_count(mb) <= bench.timing.MAX_COPIES
    small = reference_impls.get("add_rmsnorm").min_bytes(Point(batch=1, tp=8))
    assert bench.rotation_count(small) * small < l2_rotation           # the default: B* at B=1


def test_table_marks_points_whose_rotation_stays_in_l2(bench, capsys):
    row = lambda b, rot: {"tp": 8, "batch": b, "floor_us": 0.1, "rotation_bytes": rot,          # noqa: E731
                          "times": {"eager": {"median_us": 20.0}, "compile": {"median_us": 2.5},
                                    "rowreg:aa": {"median_us": 2.0}}}
    rec = {"op": "add_rmsnorm", "candidates": {"rowreg:aa": {"id": "aa", "check": {"p": {"ok": True}}}},
           "rows": [row(1, 64 * 30_000), row(64, int(bench.L2_BYTES * 3.5))]}
    bench.print_table(rec)
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].split("|")[1].strip() == "1*" and lines[4].split("|")[1].strip() == "64"
    assert sum(line.startswith("  B*: the rotated inputs") for line in lines) == 1


def test_unfused_bar_is_skinny_gemm_then_situ_as_the_registry_routes_them(bench):
    """The bar is what the decoder runs without the fused kernel: each op through the registry, so a
    promoted skinny_gemm kernel whose scope covers the call runs; elsewhere cuBLAS's bf16 GEMM (the
    bar skinny_gemm must beat), not the fp32 reference the registry falls back to."""
    import torch

    from harness.registry import KernelScope, Registry

    calls: list[tuple[int, int]] = []

    def fake_gemm(x, weight, out):                       # a "promoted kernel" for dense_gate_up only
        calls.append((x.shape[0], weight.shape[0]))
        out.copy_(reference_impls.get("skinny_gemm").reference(x=x, weight=weight)["out"])

    reg = Registry()
    scope = KernelScope(archs=("cpu",), tp=(16,), batch=(1, 8), dtypes=("bf16",), state_dtypes=(),
                        shapes=("dense_gate_up",))
    reg.register("skinny_gemm", scope, fake_gemm, candidate="feedfacecafe")
    label, run = bench.unfused_gate_up_act(16, reg)
    assert label == bench.UNFUSED == "unfused"
    defn = reference_impls.get("gemm_situ_and_mul")
    situ = reference_impls.get("situ_and_mul").reference
    for shape, kernel in (("dense_gate_up", "skinny_gemm:feedfacecafe"), ("shared_gate_up", "skinny_gemm:cublas")):
        inputs = defn.make_inputs(Point(batch=2, tp=16, shape=shape), torch.Generator().manual_seed(0), "cpu")
        x, w = inputs["x"], inputs["weight"]
        calls.clear()
        out = run(x, w, shape)
        if shape == "dense_gate_up":                      # the kernel, then the SiTU: the fused op's reference
            assert torch.equal(out, defn.reference(x=x, weight=w)["out"]) and calls == [(2, w.shape[0])]
        else:                                             # cuBLAS's bf16 GEMM, then the SiTU
            assert torch.equal(out, situ(x @ w.t())["out"]) and calls == []
        assert run.ran(x, w, shape) == {"skinny_gemm": kernel, "situ_and_mul": "situ_and_mul:reference"}

    def broken(x, weight, out):
        raise RuntimeError("launch failed")
    reg.register("skinny_gemm", scope, broken, candidate="feedfacecafe")   # the registry runs the reference instead
    inputs = defn.make_inputs(Point(batch=2, tp=16, shape="dense_gate_up"), torch.Generator().manual_seed(0), "cpu")
    assert run.ran(inputs["x"], inputs["weight"], "dense_gate_up")["skinny_gemm"].startswith(
        "skinny_gemm:failed (skinny_gemm: RuntimeError: launch failed")


def test_table_shows_the_bar_column_of_a_tp_dependent_baseline(bench, capsys):
    t = lambda us: {"median_us": us}  # noqa: E731
    rec = {"op": "gemm_situ_and_mul", "baseline": "unfused",
           "candidates": {"k:abc": {"id": "abc", "check": {"B=1": {"ok": True, "summary": ""}}}},
           "rows": [{"tp": 8, "batch": 1, "shape": "shared_gate_up", "floor_us": 5.0,
                     "times": {"eager": t(60.0), "compile": t(30.0), "unfused": t(12.0), "k:abc": t(10.0)}}]}
    bench.print_table(rec)
    head, row = capsys.readouterr().out.splitlines()[2:4]
    cols = [c.strip() for c in head.split("|")]
    cells = [c.strip() for c in row.split("|")]
    assert cells[cols.index("unfused")] == "12.00"
    assert cells[cols.index("best vs unfused")] == "1.20"


def test_references_are_timed_in_a_group_of_their_own(bench):
    """Session 36's A/A probe: the eager reference inside the kernels' interleave biased two copies
    of one kernel 2-2.5% apart by order; the candidates and the baseline form the first group."""
    impls = {"eager": 1, "compile": 2, "cublas": 3, "swapab:c8b7a7": 4, "swapab:268009": 5}
    assert bench.timing_groups(impls) == [{"cublas": 3, "swapab:c8b7a7": 4, "swapab:268009": 5},
                                          {"eager": 1, "compile": 2}]
    assert bench.timing_groups({"swapab:c8b7a7": 4}) == [{"swapab:c8b7a7": 4}]      # --no-eager --no-compile-baseline
    assert bench.timing_groups({"eager": 1}) == [{"eager": 1}]


def test_eager_copies_give_eager_a_group_of_its_own_on_fewer_sets(bench):
    """--eager-copies N: eager leaves the references' group and is timed over the first N sets;
    without it (0), or with N at least the kernels' count, the groups are timing_groups' over all."""
    impls = {"eager": 1, "compile": 2, "swapab:c8b7a7": 4}
    assert bench.timing_plan(impls, 4096) == [({"swapab:c8b7a7": 4}, 4096), ({"eager": 1, "compile": 2}, 4096)]
    assert bench.timing_plan(impls, 4096, 64) == [({"swapab:c8b7a7": 4}, 4096), ({"compile": 2}, 4096),
                                                  ({"eager": 1}, 64)]
    assert bench.timing_plan(impls, 50, 64) == bench.timing_plan(impls, 50)
    assert bench.timing_plan({"eager": 1, "k": 3}, 100, 10) == [({"k": 3}, 100), ({"eager": 1}, 10)]
    assert bench.timing_plan({"k": 3}, 100, 10) == [({"k": 3}, 100)]            # --no-eager


def test_table_notes_an_eager_reference_on_fewer_sets(bench, capsys):
    row = lambda b, eager_rot: {"tp": 8, "batch": b, "floor_us": 0.1,                          # noqa: E731
                                "rotation_bytes": int(bench.L2_BYTES * 3.5), "eager_rotation_bytes": eager_rot,
                                "times": {"eager": {"median_us": 20.0}, "rowreg:aa": {"median_us": 2.0}}}
    rec = {"op": "add_rmsnorm", "candidates": {"rowreg:aa": {"id": "aa", "check": {"p": {"ok": True}}}},
           "rows": [row(1, 64 * 30_000), row(64, int(bench.L2_BYTES * 3.5))]}
    bench.print_table(rec)
    out = capsys.readouterr().out
    assert "  eager: fewer rotated sets than the kernels (--eager-copies); partly in L2 at B = 1\n" in out


class _Launcher:
    """A kernel module whose launch raises or returns, for launch_checked."""

    def __init__(self, error: Exception | None):
        self.error = error

    def launch(self, compiled, **tensors):
        if self.error:
            raise self.error


def test_a_launch_that_raises_leaves_no_cuda_error_for_the_next_kernel(bench, monkeypatch):
    """Session 43 on the H200: a CuTe launch raised its own ValueError and left the CUDA error set,
    and the next variant was recorded as failed in its place. The runtime's error (here a stand-in
    raised by the probe kernel) is consumed, and the launch's own exception is the one raised."""
    pending = [RuntimeError("CUDA error: invalid argument")]

    def probe():
        if pending:
            raise pending.pop()
    monkeypatch.setattr(bench, "surface_launch_error", probe)
    with pytest.raises(ValueError, match="own"):
        bench.launch_checked(_Launcher(ValueError("its own")), None, {})
    assert not pending                          # consumed by the failing launch, not left for the next
    bench.launch_checked(_Launcher(None), None, {})


def test_a_launch_that_only_printed_its_error_raises_it(bench, monkeypatch):
    def probe():
        raise RuntimeError("CUDA error: invalid argument")
    monkeypatch.setattr(bench, "surface_launch_error", probe)
    with pytest.raises(RuntimeError, match="invalid argument"):
        bench.launch_checked(_Launcher(None), None, {})


def test_points_of_equal_shapes_share_a_timing_only_with_the_same_columns(bench):
    """skinny_gemm's kda_o_proj at TP16 has shared_down's TP8 shapes. Session 52's run copied the
    TP8 row, which timed 91b17e (scoped to shared_down TP8), into kda_o_proj TP16, where a87a4d runs:
    a row may stand for another only when the same candidates are in scope at both."""
    defn = reference_impls.get("skinny_gemm")
    tp8 = Point(batch=1, tp=8, shape="shared_down")
    tp16 = Point(batch=1, tp=16, shape="kda_o_proj")
    assert defn.shapes(tp8) == defn.shapes(tp16)
    refs = {"eager": None, "compile": None, "cublas": None}
    assert bench.timing_key(defn, tp8, {**refs, "swapab:91b17e": None}) != \
        bench.timing_key(defn, tp16, {**refs, "swapab:a87a4d": None})
    assert bench.timing_key(defn, tp8, {**refs, "swapab:a87a4d": None}) == \
        bench.timing_key(defn, tp16, {"swapab:a87a4d": None, **refs})
    router = reference_impls.get("moe_router")        # replicated: TP16 is TP8
    assert bench.timing_key(router, Point(batch=4, tp=8), refs) == bench.timing_key(router, Point(batch=4, tp=16), refs)
    assert bench.timing_key(router, Point(batch=4, tp=8), refs) != bench.timing_key(router, Point(batch=8, tp=8), refs)
