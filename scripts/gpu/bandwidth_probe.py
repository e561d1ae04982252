"""How steady is the floor's denominator? Calls `timing.measure_bandwidth` (what bench_kernels.py
and the perf gate divide bytes by) many times in one process, at its default size and two
others, and names the physical GPU (UUID, serial, clocks), so runs of different sessions can be
told apart: a spread within a process is the method's noise, one between processes on other
GPUs is the machine's.

    source .device/cutedsl/setup.sh && PYTHONPATH=$PWD python3 scripts/gpu/bandwidth_probe.py [--calls 10]

Prints one line per size and writes $OUT/bandwidth_probe.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.toolchain import timing  # noqa: E402

SIZES_BYTES = (512 << 20, 2 << 30, timing.COPY_BENCH_BYTES, 8 << 30)
SMI_FIELDS = "uuid,serial,pci.bus_id,clocks.mem,clocks.sm,clocks.max.mem,clocks.max.sm,temperature.gpu,power.draw"


def gpu_identity() -> dict[str, str]:
    """nvidia-smi's view of GPU 0 (empty when the tool is missing)."""
    try:
        line = subprocess.run(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return dict(zip(SMI_FIELDS.split(","), (v.strip() for v in line.split(","))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10, help="measure_bandwidth calls per size")
    a = ap.parse_args()
    out: dict = {"gpu_before": gpu_identity(), "sizes": []}
    print(f"{'copy MB':>8} | {'median TB/s':>11} | {'min':>6} | {'max':>6} | {'spread %':>8}")
    for n_bytes in SIZES_BYTES:
        tbs = [timing.measure_bandwidth(n_bytes) / 1e12 for _ in range(a.calls)]
        med = statistics.median(tbs)
        spread_pct = 100 * (max(tbs) - min(tbs)) / med
        out["sizes"].append({"n_bytes": n_bytes, "tb_per_s": tbs, "median_tb_per_s": med, "spread_pct": spread_pct})
        print(f"{n_bytes >> 20:>8} | {med:>11.3f} | {min(tbs):>6.3f} | {max(tbs):>6.3f} | {spread_pct:>8.2f}")
    out["gpu_after"] = gpu_identity()
    print("GPU:", json.dumps(out["gpu_before"]))
    dest = Path(os.environ.get("OUT", ".")) / "bandwidth_probe.json"
    dest.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
