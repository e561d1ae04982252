"""scripts/gpu/diag_probe.py: its input checks and ratios on the CPU; on a GPU, one kernel.py timed
against a copy of itself (an A/A: both correct, the ratio near 1)."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from gpu_scripts import gpu_script

ROOT = Path(__file__).resolve().parents[1]
SITU = ROOT / "kernels_generated" / "situ_and_mul" / "59ea067f1155"     # the promoted situ_and_mul


@pytest.fixture(scope="module")
def dp():
    return gpu_script("diag_probe")


def _variant(root: Path, name: str, text: str = "# kernel\n") -> str:
    (root / name).mkdir(parents=True)
    (root / name / "kernel.py").write_text(text)
    return str(root / name)


def test_variants_keep_their_order_and_are_named_by_folder(dp, tmp_path):
    a, b = _variant(tmp_path, "base"), _variant(tmp_path / "x", "x0")
    assert dp.variant_folders(f"{a}, {b},") == {"base": a, "x0": b}


@pytest.mark.parametrize("case, message", [
    ("empty", "names no folder"),
    ("missing", "no kernel.py in"),
    ("same_name", "distinct names"),
])
def test_bad_variant_lists_exit_with_the_reason(dp, tmp_path, case, message):
    a = _variant(tmp_path / "one", "k")
    spec = {"empty": " , ", "missing": f"{a},{tmp_path / 'nothing'}", "same_name": f"{a},{_variant(tmp_path / 'two', 'k')}"}[case]
    with pytest.raises(SystemExit, match=message):
        dp.variant_folders(spec)


def test_batches_must_be_positive_integers(dp):
    assert dp.batch_list("1, 8,64") == [1, 8, 64]
    for bad in ("", "0,1", "one", "1.5"):
        with pytest.raises(SystemExit, match="positive integers"):
            dp.batch_list(bad)


def test_ratios_read_against_the_first_variant(dp):
    got = dp.ratios({"base": 2.0, "x0": 1.5, "nox": 3.0})
    assert got == {"base": 1.0, "x0": 0.75, "nox": 1.5}
    assert math.isnan(dp.ratios({"base": 0.0, "x0": 1.0})["x0"])


def test_records_are_named_so_one_call_keeps_each_run(dp):
    names = {dp.record_name("kda_decode", "", 8, "bf16"), dp.record_name("kda_decode", "", 8, "fp32"),
             dp.record_name("kda_decode", "", 16, "fp32"), dp.record_name("skinny_gemm", "mla_qkv_a", 8)}
    assert len(names) == 4
    assert dp.record_name("skinny_gemm", "mla_qkv_a", 8) == "diag_skinny_gemm_mla_qkv_a_tp8.json"
    assert dp.record_name("situ_and_mul", "", 8) == "diag_situ_and_mul_default_tp8.json"


def test_an_unknown_op_exits_before_any_gpu_work(dp, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: pytest.fail("touched the GPU"))
    with pytest.raises(SystemExit, match="no op 'moe_routr'"):
        dp.main(["--op", "moe_routr", "--kernels", _variant(tmp_path, "k")])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_kernel_against_its_own_copy_reads_one(dp, tmp_path, monkeypatch):
    for name in ("aa_first", "aa_second"):
        shutil.copytree(SITU, tmp_path / name, ignore=shutil.ignore_patterns("evidence"))
    broken = _variant(tmp_path, "broken", "def compile(tp, options, **static):\n    raise RuntimeError('no kernel here')\n")
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    rec = dp.main(["--op", "situ_and_mul", "--batches", "1,64", "--rounds", "3",
                   "--kernels", f"{tmp_path / 'aa_first'},{broken},{tmp_path / 'aa_second'}"])
    assert [r["batch"] for r in rec["rows"]] == [1, 64]
    for row in rec["rows"]:
        first, second = row["variants"]["aa_first"], row["variants"]["aa_second"]
        assert first["ok"] and second["ok"], (first["check"], second["check"])
        assert first["vs_first"] == 1.0 and 0.85 < second["vs_first"] < 1.15, row
        assert first["median_us"] > 0
        # a variant that cannot compile is recorded with its error and left out of the timing
        assert row["variants"]["broken"] == {"ok": False, "error": "RuntimeError: no kernel here"}
    written = json.loads((tmp_path / "out" / "diag_situ_and_mul_default_tp8.json").read_text())
    assert written["rows"] == json.loads(json.dumps(rec["rows"]))


ROUTER = ROOT / "kernels_generated" / "moe_router" / "876e935cf35f"   # the promoted moe_router
_PAD_AFTER = "        sOutI = smem.allocate_tensor(Int32, cute.make_layout((TOP_K,), stride=(1,)), byte_alignment=16)\n"


def _too_much_shared_memory(root: Path) -> str:
    """The promoted router with 240 KiB of unused shared memory in its top-k kernel: it compiles, and
    its launch fails (an H200 SM has 227 KiB)."""
    src = (ROUTER / "kernel.py").read_text()
    assert src.count(_PAD_AFTER) == 1, "the router kernel changed: update this test's edit"
    src = src.replace(_PAD_AFTER, _PAD_AFTER + "        pad = smem.allocate_tensor(Int32, cute.make_layout((60 * 1024,), stride=(1,)), byte_alignment=16)\n")
    return _variant(root, "toolarge", src)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_variant_whose_launch_fails_is_recorded_and_the_run_goes_on(dp, tmp_path, monkeypatch):
    """Session 42: such a variant printed its launch error without raising, and torch raised at its
    next kernel launch, outside every variant's try, which ended the run (bench_kernels'
    surface_launch_error now raises it inside the variant's check)."""
    for name in ("first", "second"):
        shutil.copytree(ROUTER, tmp_path / name, ignore=shutil.ignore_patterns("evidence"))
    bad = _too_much_shared_memory(tmp_path)
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    rec = dp.main(["--op", "moe_router", "--batches", "1,8", "--rounds", "3",
                   "--kernels", f"{tmp_path / 'first'},{bad},{tmp_path / 'second'}"])
    assert [r["batch"] for r in rec["rows"]] == [1, 8]
    for row in rec["rows"]:
        assert row["variants"]["toolarge"]["ok"] is False and "error" in row["variants"]["toolarge"], row
        assert "median_us" not in row["variants"]["toolarge"]
        for name in ("first", "second"):
            assert row["variants"][name]["ok"] and row["variants"][name]["median_us"] > 0, row
