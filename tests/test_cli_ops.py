"""`harness ops`, `harness ops show`, `harness ref`: every op, and the bad-input contract
(one line on stderr, exit 2, no traceback, nothing written)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import reference_impls


@pytest.mark.parametrize("tp", [8, 16])
def test_ops_table_json(tp: int, run_cli) -> None:
    code, out, _ = run_cli(["ops", "--gpu", "h200", "--tp", str(tp), "--json"])
    assert code == 0
    rows = json.loads(out)
    assert [r["op"] for r in rows] == list(reference_impls.OP_NAMES)
    for r in rows:
        p1, p64 = r["points"]["1"], r["points"]["64"]
        assert 0 < p1["min_bytes"] <= p64["min_bytes"] and p1["floor_us"] > 0
        assert r["gpu"] == "h200" and r["tp"] == tp


def test_ops_table_human(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")                 # rich wraps long names at 80 columns
    code, out, _ = run_cli(["ops", "--gpu", "h200"])
    assert code == 0
    for op in reference_impls.OP_NAMES:
        assert op in out


@pytest.mark.parametrize("op", reference_impls.OP_NAMES)
def test_ops_show(op: str, run_cli) -> None:
    code, out, _ = run_cli(["ops", "show", op, "--json"])
    assert code == 0
    info = json.loads(out)
    defn = reference_impls.get(op)
    assert [t["name"] for t in info["inputs"]] == [t.name for t in defn.inputs]
    assert set(info["tolerances"]) == {t.name for t in defn.outputs}
    from harness.agent.ledger import load_ledger

    assert [m["record"] for m in info["measured"]] == [m.record for m in load_ledger(op)]
    code, out, _ = run_cli(["ops", "show", op, "--tp", "16"])
    assert code == 0 and op in out
    assert ("measured on a GPU before, not kept" in out) == bool(info["measured"])


def test_ops_show_lists_the_ledger(run_cli) -> None:
    """attn_res keeps a ledger: the human view names the file and each entry's record."""
    code, out, _ = run_cli(["ops", "show", "attn_res"])
    assert code == 0 and "prompts/kernels/attn_res/measured.json" in out.replace("\n", "")
    assert "results/h200/session34/bench_ar_mma2.log" in out.replace("\n", "")


# ref on every op whose inputs are small; moe_experts draws all 896 experts (~1 GB at TP16)
CHEAP = [op for op in reference_impls.OP_NAMES if op != "moe_experts"]


@pytest.mark.parametrize("op", CHEAP)
def test_ref_saves_inputs_and_outputs(op: str, tmp_path: Path, run_cli) -> None:
    f = tmp_path / f"{op}.pt"
    argv = ["ref", op, "--batch", "2", "--tp", "16", "--seed", "3", "--save", str(f)]
    if reference_impls.get(op).uses_context:
        argv += ["--context", "40"]
    code, _, err = run_cli(argv)
    assert code == 0, err
    saved = torch.load(f)
    defn = reference_impls.get(op)
    assert set(saved["inputs"]) == {t.name for t in defn.inputs}
    assert set(saved["outputs"]) == {t.name for t in defn.outputs}
    again = defn.run_reference(saved["inputs"])
    assert all(torch.equal(again[k], saved["outputs"][k]) for k in again)


def test_ref_saves_with_open_permissions(tmp_path: Path, run_cli) -> None:
    """The saved file gets what open() would give it (0666 less the umask), not mkstemp's 0600."""
    import os
    import stat

    f = tmp_path / "router.pt"
    old = os.umask(0o022)
    try:
        code, _, err = run_cli(["ref", "moe_router", "--save", str(f)])
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE(f.stat().st_mode) == 0o644


def test_ref_kda_bf16_state(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "kda.pt"
    code, _, err = run_cli(["ref", "kda_decode", "--batch", "3", "--tp", "16", "--state-dtype", "bf16", "--save", str(f)])
    assert code == 0, err
    saved = torch.load(f)
    assert saved["inputs"]["state"].dtype == torch.bfloat16 == saved["outputs"]["state"].dtype


@pytest.mark.slow          # draws every expert's MXFP4 weights (~1 GB) and decodes 16 of them
def test_ref_moe_experts(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "moe.pt"
    code, _, err = run_cli(["ref", "moe_experts", "--batch", "1", "--tp", "16", "--routing", "hot", "--save", str(f)])
    assert code == 0, err
    saved = torch.load(f)
    assert saved["inputs"]["w13"].shape == (896, 384, 1792) and saved["outputs"]["out"].shape == (1, 3584)


@pytest.mark.parametrize("argv", [
    ["ref", "nope", "--batch", "1"],
    ["ref", "rmsnorm", "--batch", "0"],
    ["ref", "rmsnorm", "--batch", "65"],
    ["ref", "rmsnorm", "--batch", "1", "--tp", "4"],
    ["ref", "kda_decode", "--batch", "1", "--state-dtype", "fp8"],
    ["ref", "rmsnorm", "--batch", "1", "--shape", "nb1"],
    ["ref", "attn_res", "--batch", "1", "--shape", "nb9"],
    ["ref", "rmsnorm", "--batch", "1", "--context", "100"],
    ["ops", "show", "nope"],
    ["ops", "show", "rmsnorm", "--gpu", "a100x"],
    ["ops", "show", "rmsnorm", "--tp", "4"],
    ["ops", "--gpu", "a100x"],
    ["ops", "--tp", "4"],
])
def test_bad_input_one_line_exit_2_nothing_written(argv: list[str], tmp_path: Path, run_cli) -> None:
    f = tmp_path / "x.pt"
    if argv[0] == "ref":
        argv = argv + ["--save", str(f)]
    code, out, err = run_cli(argv)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:"), err
    assert "Traceback" not in err + out
    assert list(tmp_path.iterdir()) == []


def test_shape_on_an_op_without_named_shapes_names_those_that_have_them(tmp_path: Path, run_cli) -> None:
    code, _, err = run_cli(["ref", "rmsnorm", "--batch", "1", "--shape", "nb1", "--save", str(tmp_path / "x.pt")])
    named = sorted(d.name for d in reference_impls.all_ops() if d.extra.get("shape_names"))
    assert code == 2 and "attn_res" in named and all(n in err for n in named), err


def test_save_under_a_file_is_one_line_exit_2(tmp_path: Path, run_cli) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    code, out, err = run_cli(["ref", "rmsnorm", "--save", str(plain / "x.pt")])
    assert code == 2 and "Traceback" not in err + out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and "not a folder" in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_ref_context_help_says_what_its_default_0_means(tmp_path: Path, run_cli) -> None:
    """`--context` shows [default: 0]; its help said "default 1024". 0 means the op's default
    context (harness.agent.stages.POINT_CONTEXT): the help says so, and a run without
    --context saves that context."""
    import typer.main

    from harness.agent.stages import POINT_CONTEXT
    from harness.cli import app

    (opt,) = [p for p in typer.main.get_command(app).commands["ref"].params if p.name == "context"]
    assert opt.default == 0 and f"0 = the op's default, {POINT_CONTEXT}" in opt.help, opt.help
    f = tmp_path / "mla.pt"
    code, _, err = run_cli(["ref", "mla_decode", "--batch", "1", "--save", str(f)])
    assert code == 0, err
    assert torch.load(f)["point"]["context"] == POINT_CONTEXT
