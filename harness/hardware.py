"""GPU profiles and the roofline: the time floor of an op at a point, and what bounds it.

Datasheet numbers; perf gates replace `hbm_bytes_per_s` with the bandwidth measured on
the same GPU in the same run (an H200 streams ~3.4-3.6 TB/s, not the 4.8 on its sheet).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProfile:
    name: str
    arch: str                    # CuTe DSL target, CUTE_DSL_ARCH
    sm_count: int
    hbm_bytes_per_s: float       # datasheet peak
    bf16_dense_flop_per_s: float
    l2_bytes: int
    memory_bytes: int


GPUS: dict[str, GpuProfile] = {
    "h100": GpuProfile("h100", "sm_90a", 132, 3.35e12, 989e12, 50 * 2**20, 80 * 2**30),
    "h200": GpuProfile("h200", "sm_90a", 132, 4.8e12, 989e12, 60 * 2**20, 141 * 2**30),
    "b200": GpuProfile("b200", "sm_100a", 148, 8.0e12, 2250e12, 126 * 2**20, 180 * 2**30),
    "gb300": GpuProfile("gb300", "sm_103a", 160, 8.0e12, 2500e12, 126 * 2**20, 279 * 2**30),
}

TARGET_ARCHS = ("sm_90a", "sm_100a", "sm_103a")


def gpu(name: str) -> GpuProfile:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown GPU '{name}' (choose from {', '.join(GPUS)})") from None


@dataclass(frozen=True)
class Roofline:
    floor_s: float
    memory_s: float
    compute_s: float
    bound: str                   # "memory" | "compute"

    @property
    def floor_us(self) -> float:
        return self.floor_s * 1e6


def roofline(flops: int, min_bytes: int, profile: GpuProfile, hbm_bytes_per_s: float | None = None) -> Roofline:
    """Time floor = max(bytes / bandwidth, flops / peak). Pass a measured bandwidth to
    replace the datasheet's."""
    bw = hbm_bytes_per_s or profile.hbm_bytes_per_s
    mem = min_bytes / bw
    comp = flops / profile.bf16_dense_flop_per_s
    return Roofline(max(mem, comp), mem, comp, "memory" if mem >= comp else "compute")
