"""What the benchmark's timing charges a kernel that does (almost) nothing: the launch floor.

    source scripts/gpu/setup.sh && python3 scripts/gpu/launch_floor.py [--rounds 10]

bench_kernels.py times every kernel by CUDA-graph replay after a separator kernel whose own time
is subtracted (harness/toolchain/timing.py). The HBM floor of an op (bytes / bandwidth) ignores
what any kernel costs there: its launch in the graph, its CTAs' start and its drain. This script
times CuTe DSL kernels of the shapes our kernels launch, each doing no memory work beyond one
16-byte load and store per CTA, with exactly the same timing; the medians are the floor under
every "at most N us" or "within X of the HBM floor" figure. Prints a table and writes
$OUT/launch_floor.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Int16, const_expr

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    """One launch configuration: grid x * y CTAs of `threads`, optionally clusters of `cluster`
    CTAs along x, optionally launched with programmatic dependent launch."""
    name: str
    grid_x: int
    grid_y: int
    threads: int
    cluster: int = 1
    pdl: bool = False

    @property
    def ctas(self) -> int:
        return self.grid_x * self.grid_y


SHAPES = (
    Shape("1 CTA x 32", 1, 1, 32),
    Shape("1 CTA x 448", 1, 1, 448),
    Shape("64 CTAs x 448", 1, 64, 448),
    Shape("128 CTAs x 448", 1, 128, 448),
    Shape("128 CTAs x 448, clusters of 2", 2, 64, 448, cluster=2),
    Shape("64 CTAs x 128, clusters of 8", 8, 8, 128, cluster=8),
    Shape("528 CTAs x 256", 1, 528, 256),
    Shape("1 CTA x 32, PDL", 1, 1, 32, pdl=True),
)


def build(shape: Shape):
    """A CuTe DSL kernel of this launch shape: CTA (x, y) loads 16 bytes of row y*grid_x + x of a
    [ctas, 8] int16 buffer and stores them back plus one (thread 0 only); compiled for the device."""
    class Touch:
        @cute.jit
        def __call__(self, m: cute.Tensor, stream: cuda.CUstream):
            if const_expr(shape.cluster > 1):
                self.kernel(m).launch(grid=[shape.grid_x, shape.grid_y, 1], block=[shape.threads, 1, 1],
                                      cluster=[shape.cluster, 1, 1], stream=stream, use_pdl=shape.pdl)
            else:
                self.kernel(m).launch(grid=[shape.grid_x, shape.grid_y, 1], block=[shape.threads, 1, 1],
                                      stream=stream, use_pdl=shape.pdl)

        @cute.kernel
        def kernel(self, m: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            bx, by, _ = cute.arch.block_idx()
            if const_expr(shape.pdl):
                cute.arch.griddepcontrol_wait()
            if tidx == 0:
                r = cute.make_rmem_tensor(cute.make_layout((8,)), Int16)
                cute.autovec_copy(m[by * shape.grid_x + bx, None], r)
                r.store(r.load() + Int16(1))
                cute.autovec_copy(r, m[by * shape.grid_x + bx, None])

    fake = cute.runtime.make_fake_compact_tensor(Int16, (shape.ctas, 8), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(Touch(), fake, stream, options="--enable-tvm-ffi")


def time_shapes(shapes, rounds: int) -> dict:
    """Each shape's kernel built and timed together (harness timing, interleaved, 100 calls per
    graph): name -> TimingStats. Checks afterwards that every call ran."""
    import torch

    from harness.toolchain import timing

    impls, bufs = {}, {}
    for s in shapes:
        compiled = build(s)
        bufs[s.name] = [torch.zeros(s.ctas, 8, dtype=torch.int16, device="cuda") for _ in range(2)]
        impls[s.name] = lambda i, c=compiled, b=bufs[s.name]: c(b[i])
    stats = timing.time_interleaved(impls, 2, calls_per_graph=100, rounds=rounds)
    for s in shapes:                                   # every call ran: 2 sets, warm-up + graph replays
        assert int(bufs[s.name][0][0, 0].item()) > 0, s.name
    return stats


def table(rows: list[dict]) -> str:
    """The printed table: one line per launch shape, median and p10..p90 (us)."""
    out = [f"{'launch shape':<34} | {'median us':>9} | {'p10..p90 us':>13}"]
    for r in rows:
        out.append(f"{r['name']:<34} | {r['median_us']:>9.2f} | {r['p10_us']:>6.2f}..{r['p90_us']:<6.2f}")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("launch_floor.py needs a CUDA GPU")
    stats = time_shapes(SHAPES, args.rounds)
    rows = [dict(asdict(s), ctas=s.ctas, **stats[s.name].as_dict()) for s in SHAPES]
    print(f"device {torch.cuda.get_device_name()}; separator-subtracted CUDA-graph replay, 100 calls per graph")
    print(table(rows))
    out = Path(os.environ.get("OUT", ".")) / "launch_floor.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
