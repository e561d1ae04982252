"""scripts/compare_runs.py: the new / old time ratios of two bench_kernels.py runs, point by point."""
from __future__ import annotations

import json
import lzma

import pytest
from gpu_scripts import tool_script


@pytest.fixture(scope="module")
def cr():
    return tool_script("compare_runs")


def _row(tp: int, batch: int, floor_us: float, **times_us: float) -> dict:
    return {"tp": tp, "batch": batch, "shape": "", "state_dtype": "", "floor_us": floor_us,
            "times": {c: {"median_us": t} for c, t in times_us.items()}}


def _run(bw: float, rows: list[dict], op: str = "moe_router") -> dict:
    return {"bandwidth_bytes_per_s": bw, "ops": {op: {"op": op, "rows": rows}}}


def test_ratios_pair_points_and_columns_by_name(cr):
    old = _run(4e12, [_row(8, 1, 3.0, ours=10.0, copy=5.0), _row(8, 8, 3.0, ours=20.0, copy=5.0),
                      _row(16, 1, 3.0, ours=99.0)])
    new = _run(4.2e12, [_row(8, 1, 2.5, ours=11.0, copy=5.0), _row(8, 8, 2.5, ours=19.0, copy=5.5),
                        _row(8, 64, 2.5, ours=1.0)])          # B=64 has no old point: not compared
    got = {r.column: r for r in cr.compare(old, new)}
    assert set(got) == {"ours", "copy", "floor"}
    assert got["ours"].points == 2 and got["ours"].low == pytest.approx(0.95) and got["ours"].high == pytest.approx(1.1)
    assert got["ours"].median == pytest.approx(1.025)
    assert got["copy"].median == pytest.approx(1.05) and got["floor"].median == pytest.approx(2.5 / 3.0)


def test_an_op_only_one_run_holds_is_left_out(cr):
    old = _run(4e12, [_row(8, 1, 3.0, ours=10.0)], op="attn_res")
    new = _run(4e12, [_row(8, 1, 3.0, ours=10.0)])
    assert cr.compare(old, new) == []


def test_cli_reads_xz_and_prints_json(cr, tmp_path, capsys):
    a, b = tmp_path / "a.json.xz", tmp_path / "b.json"
    a.write_bytes(lzma.compress(json.dumps(_run(4e12, [_row(8, 1, 3.0, ours=10.0)])).encode()))
    b.write_text(json.dumps(_run(4e12, [_row(8, 1, 3.0, ours=12.0)])))
    assert cr.main([str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    ours = next(r for r in doc["ratios"] if r["column"] == "ours")
    assert ours["median"] == pytest.approx(1.2) and ours["points"] == 1


def test_a_file_that_is_no_run_is_one_line_exit_2(cr, tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    assert cr.main([str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("compare_runs: error:") and "no bench_kernels.py run" in err
    assert cr.main([str(tmp_path / "missing.json"), str(bad)]) == 2
