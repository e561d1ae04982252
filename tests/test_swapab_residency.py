"""scripts/swapab_residency.py: the partition, registers and resident CTAs of swap-AB renders,
read on the CPU before a GPU bench."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/swapab_residency.py"


@pytest.fixture(scope="module")
def sr():
    spec = importlib.util.spec_from_file_location("swapab_residency", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["swapab_residency"] = mod               # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_resident_ctas_takes_the_tightest_of_registers_warps_ctas_and_shared_memory(sr):
    # 150 registers: 4,864 a warp (19 units of 256); 8 warps take 38,912 of 65,536 -> one CTA
    assert sr.resident_ctas(8, 150, 8 * 4 * 32 * 4) == 1
    # 54 registers: 1,792 a warp; 4 warps 7,168 -> 9 (the warp limit would allow 16)
    assert sr.resident_ctas(4, 54, 4 * 4 * 32 * 4) == 9
    # 32 registers, 2 warps: registers, warps and the CTA limit allow 32; 100 KiB of shared memory 2
    assert sr.resident_ctas(2, 32, 100 * 1024) == 2
    assert sr.resident_ctas(1, 16, 0) == 32                      # the 32-CTA limit


def test_a_promoted_render_reads_its_plan_and_registers(tmp_path):
    """892ca1 (mla_q_b, TP16): its plan from its own kernel.py (K 1536 -> 1152 outputs, 16-row CTAs
    split over K), its small kernel's registers from a real sm_90a compile."""
    folder = ROOT / "kernels_generated/skinny_gemm/892ca17e084d"
    r = subprocess.run([sys.executable, str(SCRIPT), str(folder), "--tp", "8,16", "--json"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["892ca17e084d"]
    assert [(x["shape"], x["tp"], x["k"], x["n"]) for x in rows] == [("mla_q_b", 16, 1536, 1152)]   # TP8: not in scope
    row = rows[0]
    assert row["ctas"] == (1152 // 16) * row["ck"] and row["ck"] in (1, 2, 4, 8)
    assert row["registers"] and 16 <= row["registers"] <= 255
    assert row["resident_per_sm"] >= 1 and row["waves"] == round(row["ctas"] / (row["resident_per_sm"] * 132), 2)


def test_bad_input_is_one_line_not_a_traceback(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "not a candidate folder" in r.stderr and "Traceback" not in r.stderr
    folder = ROOT / "kernels_generated/skinny_gemm/892ca17e084d"
    r = subprocess.run([sys.executable, str(SCRIPT), str(folder), "--tp", "eight"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 1 and "comma list of integers" in r.stderr and "Traceback" not in r.stderr
