"""Which device copy to use as bench_kernels.py's copy yardstick: torch's copy_ (a same-dtype
contiguous copy, cudaMemcpyAsync device to device: a memcpy node once captured in a CUDA graph)
against an elementwise SM kernel (torch.neg) moving the same bytes, over sizes, with the harness's
own timing (CUDA-graph replay, rotated past 3 x L2, interleaved, median).

    source .device/cutedsl/setup.sh && PYTHONPATH=$PWD python3 scripts/gpu/copy_yardstick.py [--rounds 5]

Prints one line per size (bytes read + written) and writes $OUT/copy_yardstick.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts" / "gpu"))

import bench_kernels as bk  # noqa: E402
from harness.toolchain import timing  # noqa: E402

MOVED_BYTES = (100_000, 1_000_000, 4_000_000, 16_000_000, 64_000_000, 128_000_000)


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rows = []
    print(f"{'moved MB':>9} | {'memcpy us':>9} | {'SM us':>9} | {'memcpy TB/s':>11} | {'SM TB/s':>8}")
    for moved in MOVED_BYTES:
        n = bk.copy_elems(moved)
        sets = bk.rotation_count(8 * n)
        src, dst = bk.copy_buffers(moved, sets)
        stats = timing.time_interleaved({"memcpy": lambda i: dst[i].copy_(src[i]),
                                         "sm": lambda i: torch.neg(src[i], out=dst[i])},
                                        sets, calls_per_graph=bk.CALLS_PER_GRAPH, rounds=a.rounds)
        mc, sm = stats["memcpy"].median_us, stats["sm"].median_us
        rows.append({"moved_bytes": 8 * n, "memcpy_us": mc, "sm_us": sm, "sets": sets})
        print(f"{8 * n / 1e6:>9.1f} | {mc:>9.2f} | {sm:>9.2f} | {8 * n / mc / 1e6:>11.2f} | {8 * n / sm / 1e6:>8.2f}")
        del src, dst
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "copy_yardstick.json").write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
