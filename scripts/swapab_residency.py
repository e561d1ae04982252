"""Before a GPU bench of swap-AB GEMM renders: each render's partition at its shapes, the small
kernel's registers (ptxas, sm_90a, harness.toolchain.compile_matrix), and how many of its CTAs an SM holds
at once, so renders whose grid cannot be resident in one wave are seen on the CPU.

    python scripts/swapab_residency.py kernels_generated/skinny_gemm/268009f21621 [FOLDER ...] [--tp 8] [--json]

Session 53 (scripts/gpu/cover_plans/round2.sh): round 1's 8-warp renders held 150 registers in the
chunked small kernel, one CTA an SM, so N = 7168's 448 CTAs ran in 3.4 waves and lost to cuBLAS,
while a 4-warp ring (54 registers) had all of them resident and came within 1% of it.

Resident CTAs per SM = the least of the register file (65,536 a SM, allocated per warp in units of
256), 64 warps, 32 CTAs and 228 KiB of shared memory (the partials buffer, WARPS x FRAG x 32 fp32
plus 1 KiB reserved a CTA), as on sm_90 (H100, H200: 132 SMs). A BULK render's weight buffers are
not counted. waves = CTAs / (resident a SM x SMs): at most 1 means the whole grid runs at once.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SMS = 132
REGS_PER_SM = 65536
REG_UNIT_PER_WARP = 256
MAX_WARPS_PER_SM = 64
MAX_CTAS_PER_SM = 32
SMEM_PER_SM_BYTES = 228 * 1024
SMEM_RESERVED_PER_CTA_BYTES = 1024


@dataclass(frozen=True)
class Residency:
    shape: str
    tp: int
    k: int
    n: int
    ck: int                 # CTAs of a cluster along K
    kb: int                 # K blocks per (rank, warp) slice
    exact: bool             # every slice holds kb blocks (the ring and BULK need it)
    ctas: int
    registers: int | None   # the small kernel's, per thread
    resident_per_sm: int | None
    waves: float | None


def resident_ctas(warps: int, registers: int, smem_bytes: int) -> int:
    """CTAs of `warps` warps at `registers` a thread and `smem_bytes` of shared memory that one SM holds."""
    regs_per_warp = -(-registers * 32 // REG_UNIT_PER_WARP) * REG_UNIT_PER_WARP
    return min(REGS_PER_SM // (regs_per_warp * warps), MAX_WARPS_PER_SM // warps, MAX_CTAS_PER_SM,
               SMEM_PER_SM_BYTES // (smem_bytes + SMEM_RESERVED_PER_CTA_BYTES))


def load_kernel(folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"swapab_{folder.name}", folder / "kernel.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"swapab_residency: no kernel.py in {folder}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("plan", "gemm_kn", "WARPS", "FRAG"):
        if not hasattr(mod, name):
            raise SystemExit(f"swapab_residency: {folder} is not a swapab render (no {name})")
    return mod


def small_kernel_registers(folder: Path, op: str, tps: list[int]) -> dict[tuple[int, str], int | None]:
    """{(tp, shape): registers of the B <= SMALL_M kernel} from sm_90a compiles at `tps` (compile_matrix,
    the compile cache `harness compile` uses; the TPs compile side by side)."""
    sys.path.insert(0, str(ROOT))
    from harness.errors import UserError
    from harness.toolchain.candidate import load_candidate
    from harness.toolchain.compile import compile_matrix

    try:
        reports = compile_matrix(load_candidate(op, folder), ["sm_90a"], tps)
    except UserError as exc:
        raise SystemExit(f"swapab_residency: {exc}") from None
    out: dict[tuple[int, str], int | None] = {}
    for rep in reports:
        small = [k for k in rep.kernels if "Large" not in k.kernel]
        out[(rep.tp, rep.static.get("shape", ""))] = small[0].registers if small else None
    return out


def residency(folder: Path, tps: list[int]) -> list[Residency]:
    cand = json.loads((folder / "candidate.json").read_text())
    mod = load_kernel(folder)
    scope = cand["scope"]
    alt = getattr(mod, "uses_alt", None)
    rows: list[Residency] = []
    in_scope = [t for t in tps if t in scope.get("tp", [8, 16])]
    regs = small_kernel_registers(folder, cand["op"], in_scope) if in_scope else {}
    for tp in in_scope:
        for shape in scope["shapes"]:
            k, n = mod.gemm_kn(shape, tp)
            use_alt = bool(alt and alt(shape, tp))
            p = mod.plan(k, n, alt=True) if use_alt else mod.plan(k, n)
            warps = p.warps if use_alt else mod.WARPS
            r = regs.get((tp, shape))
            per_sm = resident_ctas(warps, r, warps * mod.FRAG * 32 * 4) if r else None
            ctas = p.n_blocks * p.ck
            rows.append(Residency(shape, tp, k, n, p.ck, p.kb, p.kb * p.ck * warps == p.kbt, ctas, r, per_sm,
                                  round(ctas / (per_sm * SMS), 2) if per_sm else None))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="swapab candidate folders (kernels_generated/OP/ID)")
    ap.add_argument("--tp", default="8,16", help="comma list of TPs (those of each scope)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        tps = [int(t) for t in a.tp.split(",") if t]
    except ValueError:
        raise SystemExit(f"swapab_residency: --tp takes a comma list of integers, not {a.tp!r}") from None
    report = {}
    for folder in a.folders:
        if not (folder / "candidate.json").is_file():
            raise SystemExit(f"swapab_residency: {folder} is not a candidate folder (no candidate.json)")
        report[folder.name] = residency(folder, tps)
    if a.json:
        print(json.dumps({fid: [asdict(r) for r in rows] for fid, rows in report.items()}, indent=1))
        return
    for fid, rows in report.items():
        print(f"== {fid}")
        for r in rows:
            print(f"  TP{r.tp} {r.shape:15s} K={r.k:5d} N={r.n:5d} ck={r.ck} kb={r.kb:2d}{' exact' if r.exact else '      '}"
                  f" ctas={r.ctas:4d} regs={r.registers} resident/SM={r.resident_per_sm} waves={r.waves}")


if __name__ == "__main__":
    main()
