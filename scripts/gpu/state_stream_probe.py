"""How fast can kda_decode's state traffic go at all? A probe for the large-batch gap.

    source scripts/gpu/setup.sh && python3 scripts/gpu/state_stream_probe.py [--batches 16,64] [--rounds 10]

kda_decode reads and writes every (token, head) state tile, D x D = 128 x 128 (64 KiB fp32,
32 KiB bf16): 100 MB per call at B = 64, TP8 (12 heads), fp32. The promoted fused kernel
(a7f1bb) holds a tile in registers, 256 threads x 64 fp32, and measures 47.5 us there against
a 26 us HBM floor. This script times CuTe DSL kernels that do nothing but that traffic, in the
same register-resident shape (one CTA of 256 threads per tile, every thread loads its 16-byte
vectors k*256 + t of the tile up front, scales them, stores them back in place), with the CTAs
per SM capped by reserving dynamic shared memory (1, 2, 3 or uncapped), and the same timing as
bench_kernels.py (separator-subtracted CUDA-graph replay, 3 state sets rotated: >= 3 x L2 at
B = 64). What it separates: if streaming alone at kda's occupancy is near 47 us, the gap is
occupancy and the missing overlap of one tile's load with another's compute (a persistent,
prefetching kernel would close it); if it is near the floor, the gap is in kda's own phases.
Prints a table and writes $OUT/state_stream_probe.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float32

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

D = 128
HEADS_TP8 = 12                            # 96 KDA heads over 8 ranks
THREADS = 256
SMEM_PER_SM_BYTES = 227 * 1024            # H200 (sm_90): the most one SM's CTAs may reserve in all


@dataclass(frozen=True)
class Probe:
    """One streaming kernel: state dtype, CTAs per SM allowed (0: as many as registers allow)."""
    dtype: str                            # "fp32" | "bf16"
    ctas_per_sm: int

    @property
    def name(self) -> str:
        cap = f"{self.ctas_per_sm} CTA/SM" if self.ctas_per_sm else "uncapped"
        return f"{self.dtype} {cap}"

    @property
    def elem_bytes(self) -> int:
        return 4 if self.dtype == "fp32" else 2

    @property
    def vectors_per_thread(self) -> int:  # 16-byte vectors
        return D * D * self.elem_bytes // 16 // THREADS

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory that leaves room for ctas_per_sm CTAs on an SM (0: none)."""
        if not self.ctas_per_sm:
            return 0
        return SMEM_PER_SM_BYTES // self.ctas_per_sm - 1024   # the driver reserves 1 KiB per CTA

    def bytes_per_call(self, batch: int) -> int:
        return 2 * batch * HEADS_TP8 * D * D * self.elem_bytes


PROBES = tuple(Probe(dt, cap) for dt in ("fp32", "bf16") for cap in (1, 2, 3, 0))


def build(probe: Probe):
    """The probe's kernel compiled for the device: CTA c streams row c of a [tiles, D*D] state."""
    dtype = Float32 if probe.dtype == "fp32" else BFloat16
    vec = 16 // probe.elem_bytes
    nv = probe.vectors_per_thread

    class Stream:
        @cute.jit
        def __call__(self, m: cute.Tensor, stream: cuda.CUstream):
            self.kernel(m).launch(grid=[m.shape[0], 1, 1],  # type: ignore[index]  # rank 2: a tuple
                                  block=[THREADS, 1, 1], smem=probe.smem_bytes, stream=stream)

        @cute.kernel
        def kernel(self, m: cute.Tensor):
            tidx, _, _ = cute.arch.thread_idx()
            tile, _, _ = cute.arch.block_idx()
            row = m[tile, None]
            regs = [cute.make_rmem_tensor(cute.make_layout((vec,)), dtype) for _ in range(nv)]
            for k in cutlass.range_constexpr(nv):          # every load first, as kda's state load
                cute.autovec_copy(cute.local_tile(row, (vec,), (k * THREADS + tidx,)), regs[k])
            for k in cutlass.range_constexpr(nv):
                regs[k].store((regs[k].load().to(Float32) * Float32(0.5)).to(dtype))
                cute.autovec_copy(regs[k], cute.local_tile(row, (vec,), (k * THREADS + tidx,)))

    m = cute.sym_int()
    fake = cute.runtime.make_fake_compact_tensor(dtype, (m, D * D), stride_order=(1, 0), assumed_align=16)
    stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute.compile(Stream(), fake, stream, options="--enable-tvm-ffi")


def time_probes(probes, batch: int, rounds: int) -> dict:
    """Each probe at this batch, timed together (harness timing, interleaved, 3 rotated state
    sets): name -> TimingStats. Checks afterwards that the kernels ran (the states were scaled)."""
    import torch

    from harness.toolchain import timing

    impls, bufs = {}, {}
    for p in probes:
        compiled = build(p)
        tdt = torch.float32 if p.dtype == "fp32" else torch.bfloat16
        bufs[p.name] = [torch.ones(batch * HEADS_TP8, D * D, dtype=tdt, device="cuda") for _ in range(3)]
        impls[p.name] = lambda i, c=compiled, b=bufs[p.name]: c(b[i])
    stats = timing.time_interleaved(impls, 3, calls_per_graph=20, rounds=rounds)
    for p in probes:
        assert float(bufs[p.name][0][0, 0].item()) < 1.0, p.name
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("state_stream_probe.py needs a CUDA GPU")
    from harness.toolchain import timing

    bw_gbps = timing.measure_bandwidth() / 1e9
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        stats = time_probes(PROBES, batch, args.rounds)
        for p in PROBES:
            floor_us = p.bytes_per_call(batch) / (bw_gbps * 1e3)
            rows.append(dict(asdict(p), name=p.name, batch=batch, bytes=p.bytes_per_call(batch),
                             floor_us=floor_us, **stats[p.name].as_dict()))
    print(f"device {torch.cuda.get_device_name()}; copy bandwidth {bw_gbps / 1e3:.2f} TB/s; "
          f"separator-subtracted CUDA-graph replay, 20 calls per graph, 3 state sets rotated")
    print(f"{'B':>3} | {'probe':<16} | {'median us':>9} | {'floor us':>8} | {'x floor':>7}")
    for r in rows:
        print(f"{r['batch']:>3} | {r['name']:<16} | {r['median_us']:>9.2f} | {r['floor_us']:>8.2f} | "
              f"{r['median_us'] / r['floor_us']:>7.2f}")
    out = Path(os.environ.get("OUT", ".")) / "state_stream_probe.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "copy_gbps": bw_gbps, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
