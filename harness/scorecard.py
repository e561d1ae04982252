"""Issue 7's targets, checked against the committed benchmark JSONs of the promoted kernels (CPU).

For each op with a promoted kernel (kernels_generated/promoted.json) this reads every
bench_kernels.py JSON under results/ (plain or .xz), keeps the latest measurement of the
promoted candidate at each point (tp, batch, shape, state dtype; "latest" = the file's last
git commit, then its path; a run that recorded the launch floor, a whole-scope run, outranks every
study that did not, whatever their order; a row whose inputs were partly served from L2 never
replaces one whose inputs rotated past it), and judges the issue's targets there:

  floor    HBM floor (bytes / the bandwidth measured in the same run) >= 2 us: ours <= 1.3 x floor;
           a smaller floor: ours <= 3 us
  compile  ours at least FACTOR x faster than torch.compile of the reference (moe_router 2,
           kda_decode 1.5, attn_res 1.3, add_rmsnorm and situ_and_mul 1: never slower); the
           compile time comes from the same row when that run measured it, else from the latest
           run that did at the point (marked "other run"); the eager column likewise (a cold run,
           bench_kernels.py --no-eager, leaves it to the warm run before it)
  cublas   skinny_gemm only: never slower than cuBLAS, and >= 1.05x faster at M = 1..8
  pair     gemm_situ_and_mul only: faster than the pair it replaces (bench_kernels.py's "unfused"
           column: skinny_gemm then situ_and_mul as the registry of the promoted kernels routes
           them; runs before session 52 timed cuBLAS for the GEMM, "cublas+situ"), the issue's
           "fused into the shared-expert path if that measures faster"

and lists the points of the kernel's scope (B in 1, 2, 4, ..., 64) that no run measured (a point
whose tensors have the shapes of a measured one counts as measured: TP16 of a replicated op).
After an op's cards, a coverage line says at how many points of the op's whole sweep (TP 8 and 16,
every sweep batch, each named shape and state dtype) any promoted kernel of it runs, and names the
shapes and batches left to the reference (a card judges only its own kernel's scope). Every
number of one scorecard comes from one card (`--gpu`, default the H200 of the issue's targets):
a run counts only where it recorded that card (run_gpu), and runs that recorded no card name
(before bench_kernels.py recorded the device, and bench_layers.py's "cuda") were all on the lent
H200. Sessions 51 and 52 got only H100s (results/h100): `harness scorecard --gpu h100` judges those.

Each point's floor target is also judged reachable or not: bench_kernels.py's CUDA-graph timing
charges even an empty kernel its run's `launch_floor_us`, so where floor + launch exceeds the
target (moe_router's ~3.2 us floor: 4.16 us target) no kernel can meet it under that timing; such
misses are marked "floor MISS*", and a run that did not record the launch floor leaves it unknown.
A miss the launch floor leaves reachable is also held against the copy yardstick of its run
(bench_kernels.py's "copy" column: an elementwise SM kernel moving the point's bytes, timed in
the same run): where even that copy exceeds the target it is marked "floor MISS^", beyond a copy:
reachable in principle, not by any kernel that moves its bytes no faster than that copy does. The
yardstick is not a strict bound (a read-mostly op reads where the copy also writes).
A point whose run rotated less than 3 x L2 of inputs (bench_kernels.py's "B*": its --max-copies,
64 by default, capped a small op's copies) was partly served from L2; its label carries "(L2)" and the floor summary
says how many of the met points are such.

    harness scorecard                            # every promoted op, then the per-layer tables
    harness scorecard --gpu h100                 # the same from the H100 runs
    harness scorecard --op kda_decode --json     # (python scripts/scorecard.py takes the same options)

The dashboard's Benchmarks page (`harness dashboard`) shows the same tables.
"""
from __future__ import annotations

import argparse
import functools
import json
import lzma
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .hardware import gpu
from .toolchain.timing import L2_ROTATION_FACTOR, partly_in_l2

ROOT = Path(__file__).resolve().parents[1]

SWEEP_BATCHES = (1, 2, 4, 8, 16, 32, 64)
FLOOR_LIMIT_US = 2.0            # floors at or above this are held to FLOOR_FACTOR x floor ...
FLOOR_FACTOR = 1.3
SMALL_CAP_US = 3.0              # ... smaller ones to this cap
DEFAULT_GPU = "h200"             # the card of issue 7's targets and of every run before session 51
GPUS = ("h200", "h100")          # the cards with committed runs (harness.hardware profile names)
L2_BYTES = gpu(DEFAULT_GPU).l2_bytes  # a rotation below L2_ROTATION_FACTOR x a card's L2 is partly cached
COMPILE_FACTOR = {"moe_router": 2.0, "kda_decode": 1.5, "attn_res": 1.3, "add_rmsnorm": 1.0, "situ_and_mul": 1.0,
                  "gemm_situ_and_mul": 1.0}
CUBLAS_ALL, CUBLAS_SMALL_M, SMALL_M = 1.0, 1.05, 8


@dataclass(frozen=True, order=True)
class Point:
    tp: int
    batch: int
    shape: str = ""
    state_dtype: str = ""

    def label(self) -> str:
        extra = " ".join(x for x in (self.shape, self.state_dtype) if x)
        return f"TP{self.tp} B={self.batch}" + (f" {extra}" if extra else "")


@dataclass
class Measurement:
    point: Point
    ours_us: float
    floor_us: float
    source: str
    eager_us: float | None = None
    compile_us: float | None = None
    compile_source: str = ""                  # "" when from the same row
    eager_source: str = ""                    # "" when from the same row
    cublas_us: float | None = None
    pair_us: float | None = None
    launch_floor_us: float | None = None      # the source run's empty-kernel time; None: not recorded
    copy_us: float | None = None              # the same row's copy yardstick; None: not timed
    partly_l2: bool | None = None             # the row's rotation < 3 x L2; None: not recorded
    compile_functional: bool = False          # torch.compile timed in its functional form (runs before session 37)
    eager_partly_l2: bool = False             # eager rotated fewer sets (--eager-copies), < 3 x L2 of them
    verdicts: dict[str, bool] = field(default_factory=dict)
    target_us: float = field(init=False)      # the floor target's limit on ours
    reachable: bool | None = field(init=False)   # floor + launch <= target; None: launch unknown
    beyond_copy: bool = field(init=False)     # reachable (or unknown), yet the copy misses the target

    def __post_init__(self) -> None:
        self.target_us = floor_target_us(self.floor_us)
        self.reachable = floor_reachable(self.floor_us, self.launch_floor_us, self.target_us)
        self.beyond_copy = self.reachable is not False and self.copy_us is not None and self.copy_us > self.target_us

    def floor_plus_launch_us(self) -> float | None:
        return None if self.launch_floor_us is None else self.floor_us + self.launch_floor_us


@dataclass
class OpCard:
    op: str
    candidate: str
    measured: list[Measurement]
    unmeasured: list[Point]
    scope_points: int = 0
    best_run: str = ""             # the one run covering most scope points ("one table from one run")
    best_run_points: int = 0
    best_run_compile_points: int = 0
    kept_by: dict[str, list[str]] = field(default_factory=dict)   # narrower promoted id -> its points' labels
    same_kernel: list[str] = field(default_factory=list)          # other ids whose rows count (same kernel.py)

    def met(self, target: str) -> tuple[int, int]:
        judged = [m.verdicts[target] for m in self.measured if target in m.verdicts]
        return sum(judged), len(judged)

    def met_partly_from_l2(self, target: str = "floor") -> int:
        """How many of the points that meet `target` were measured partly from L2."""
        return sum(bool(m.partly_l2) for m in self.measured if m.verdicts.get(target))

    def floor_misses(self) -> tuple[int, int, int, int]:
        """The floor target's misses: (unreachable, beyond a copy, reachable, unknown) under the
        harness's timing; "beyond a copy" ones are not counted as reachable or unknown."""
        missed = [m for m in self.measured if m.verdicts.get("floor") is False]
        beyond = sum(m.beyond_copy for m in missed)
        reach = [m.reachable for m in missed if not m.beyond_copy]
        return reach.count(False), beyond, reach.count(True), reach.count(None)


# ---- reading ---------------------------------------------------------------------------------------
def load_result(path: Path) -> dict | None:
    """A results JSON object (plain or .xz), or None when it is unreadable or no object."""
    try:
        raw = lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()
        data = json.loads(raw)
    except (OSError, lzma.LZMAError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def is_bench_run(d: dict) -> bool:                 # scripts/gpu/bench_kernels.py
    return isinstance(d.get("ops"), dict)


def _is_layers(d: dict) -> bool:                # scripts/gpu/bench_layers.py
    return isinstance(d.get("rows"), list) and "config" in d and all("kernels" in r for r in d["rows"])


def _commit_order(root: Path) -> dict[str, int]:
    """Each tracked file's last commit as a rank (path relative to root; a later commit ranks
    higher), from one `git log`. By rank, not by commit time: two commits made in the same second
    (the authoritative run committed right after the studies) would otherwise tie."""
    try:
        out = subprocess.run(["git", "log", "--format=%x00", "--name-only"], cwd=root,
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    entries = out.split("\0")[1:]                     # newest commit first: keep the first rank seen
    order: dict[str, int] = {}
    for i, entry in enumerate(entries):
        for path in filter(None, entry.split("\n")):
            order.setdefault(path, len(entries) - i)
    return order


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def run_gpu(d: dict) -> str | None:
    """The card a results JSON was measured on, as a GPUS name, or None for a card not in GPUS.
    bench_kernels.py records the card's name as "device", bench_layers.py as "gpu" (its "device"
    is "cuda"); a run that recorded no card name was on the lent H200 (every run before session 51)."""
    for key in ("device", "gpu"):
        name = d.get(key)
        if isinstance(name, str) and name.startswith("NVIDIA"):
            return next((g for g in GPUS if g.upper() in name.upper()), None)
    return DEFAULT_GPU


def json_files(results: Path, root: Path, gpu_name: str = DEFAULT_GPU) -> list[tuple[Path, dict]]:
    """Every JSON object under `results` (plain or .xz) measured on `gpu_name`, in all_json_files' order."""
    return on_gpu(all_json_files(results, root), gpu_name)


def on_gpu(files: list[tuple[Path, dict]], gpu_name: str) -> list[tuple[Path, dict]]:
    """The runs of `files` (all_json_files) measured on `gpu_name`, in their order: read the results
    once, then take each card's share."""
    return [(p, d) for p, d in files if run_gpu(d) == gpu_name]


def all_json_files(results: Path, root: Path) -> list[tuple[Path, dict]]:
    """Every JSON object under `results` (plain or .xz), whatever its card: runs without a launch
    floor (studies) before runs with one, each group oldest commit first (then by path)."""
    order = _commit_order(root)
    found = [(p, d) for p in sorted(results.rglob("*.json*")) if p.suffix in (".json", ".xz")
             if (d := load_result(p)) is not None]
    # studies (bench_kernels.py --no-launch-floor) first: a study committed after the whole-scope
    # run it followed must not overwrite that run's points (session 19 did, by commit order alone)
    return sorted(found, key=lambda pd: (_launch_floor_us(pd[1]) is not None, order.get(_rel(pd[0], root), 0),
                                         str(pd[0])))


def _launch_floor_us(data: dict) -> float | None:
    """The empty-kernel time bench_kernels.py recorded for the run, or None (older runs)."""
    t = data.get("launch_floor_us")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _median(times: dict, column: str | None) -> float | None:
    t = times.get(column) if column else None
    return float(t["median_us"]) if isinstance(t, dict) and "median_us" in t else None


def _partly_l2(row: dict, key: str = "rotation_bytes", l2_bytes: int = L2_BYTES) -> bool | None:
    """Whether the row's rotated inputs (`key`) spanned less than 3 x L2 (None: the run did not say)."""
    rot = row.get(key)
    return None if not isinstance(rot, (int, float)) else partly_in_l2(rot, l2_bytes)


def _eager_partly_l2(row: dict, l2_bytes: int = L2_BYTES) -> bool:
    """Whether the row's eager reference rotated its own, smaller set of inputs (bench_kernels.py
    --eager-copies) spanning less than 3 x L2; rows without eager_rotation_bytes rotated the
    kernels' sets (rotation_bytes, marked on the point)."""
    return bool(_partly_l2(row, "eager_rotation_bytes", l2_bytes))


def _point(row: dict, scope: dict) -> Point:
    """A row's point on the scope's axes: a shape or state dtype the op does not have is dropped
    (session 2's runs wrote state_dtype "fp32" for every op)."""
    return Point(int(row["tp"]), int(row["batch"]), (row.get("shape") or "") if scope.get("shapes") else "",
                 (row.get("state_dtype") or "") if scope.get("state_dtypes") else "")


# ---- judging ---------------------------------------------------------------------------------------
def floor_target_us(floor_us: float) -> float:
    """The most ours may take at a point with this HBM floor."""
    return FLOOR_FACTOR * floor_us if floor_us >= FLOOR_LIMIT_US else SMALL_CAP_US


def floor_reachable(floor_us: float, launch_floor_us: float | None, target_us: float) -> bool | None:
    """Whether any kernel could meet the floor target under a timing that charges launch_floor_us
    to an empty kernel; None when the run did not record it."""
    return None if launch_floor_us is None else floor_us + launch_floor_us <= target_us


def judge(op: str, m: Measurement) -> dict[str, bool]:
    v = {"floor": m.ours_us <= m.target_us}
    if op in COMPILE_FACTOR and m.compile_us is not None:
        v["compile"] = m.compile_us / m.ours_us >= COMPILE_FACTOR[op]
    if op == "skinny_gemm" and m.cublas_us is not None:
        v["cublas"] = m.cublas_us / m.ours_us >= (CUBLAS_SMALL_M if m.point.batch <= SMALL_M else CUBLAS_ALL)
    if op == "gemm_situ_and_mul" and m.pair_us is not None:
        v["pair"] = m.pair_us > m.ours_us
    return v


def scope_points(scope: dict) -> list[Point]:
    lo, hi = scope.get("batch", [1, 64])
    return [Point(tp, b, shape, sd) for tp in scope.get("tp", [8, 16]) for b in SWEEP_BATCHES if lo <= b <= hi
            for shape in (scope.get("shapes") or [""]) for sd in (scope.get("state_dtypes") or [""])]


def _runs_at(scope: Any, p: Point) -> bool:
    """Whether the registry would call a kernel of this scope (registry.KernelScope) at `p` on the
    committed runs' GPU (an H200: sm_90a, bf16 activations)."""
    return scope.admits("sm_90a", p.tp, p.batch, "bf16", p.state_dtype, p.shape) is None


def same_kernel_ids(op: str, candidate: str, root: Path) -> list[str]:
    """The other candidates of `op` under root whose kernel.py is byte-identical to `candidate`'s:
    one compiled kernel (the compile key is source, arch, TP, static key), so a benchmark row of
    one is a row of the other. A narrow copy (`harness narrow`) shares its parent's rows."""
    base = root / "kernels_generated" / op
    try:
        mine = (base / candidate / "kernel.py").read_bytes()
    except OSError:
        return []
    return sorted(d.name for d in base.iterdir()
                  if d.name != candidate and (d / "kernel.py").is_file() and (d / "kernel.py").read_bytes() == mine)


def card(op: str, candidate: str, scope: dict, files: list[tuple[Path, dict]], root: Path,
         kept_by: dict[Point, str] | None = None, gpu_name: str = DEFAULT_GPU) -> OpCard:
    """`kept_by`: points of the scope where a narrower promoted kernel of the op runs (point ->
    its id): left out of this card, judged on that kernel's card. `files`: runs on `gpu_name`
    (json_files), whose L2 decides which rows were partly served from it."""
    latest: dict[Point, Measurement] = {}
    compile_at: dict[Point, tuple[float, str, bool]] = {}
    eager_at: dict[Point, tuple[float, str, bool]] = {}
    from harness.registry import KernelScope

    kept_by = kept_by or {}
    l2 = gpu(gpu_name).l2_bytes
    kscope = KernelScope.from_json(scope)
    in_scope = [p for p in scope_points(scope) if p not in kept_by]
    ids = [candidate, *same_kernel_ids(op, candidate, root)]
    used: set[str] = set()                                     # ids whose column a run had
    runs: dict[str, tuple[set[str], set[str]]] = {}    # file -> (works measured, of them with compile)
    for path, data in files:                                   # oldest first: later files overwrite
        rec = data["ops"].get(op) if is_bench_run(data) else None
        if not rec:
            continue
        src, launch_us = _rel(path, root), _launch_floor_us(data)
        functional = not data.get("compile_into_outputs", False)
        col, cid = next(((label, i) for i in ids for label, info in rec.get("candidates", {}).items()
                         if info.get("id") == i), (None, None))
        if cid is not None:
            used.add(cid)
        for row in rec.get("rows", []):
            p, times = _point(row, scope), row.get("times", {})
            if p in kept_by or not _runs_at(kscope, p):        # a run may time a kernel beyond its scope
                continue
            comp = _median(times, "compile")
            if comp is not None:
                compile_at[p] = (comp, src, functional)
            if (eager := _median(times, "eager")) is not None:
                eager_at[p] = (eager, src, _eager_partly_l2(row, l2))
            ours = _median(times, col)
            if ours is None:
                continue
            works, with_compile = runs.setdefault(src, (set(), set()))
            works.add(_work(op, p))
            if comp is not None:
                with_compile.add(_work(op, p))
            pair = next((c for c in times if c.startswith(("unfused", "cublas+situ"))), None)
            partly = _partly_l2(row, l2_bytes=l2)
            if partly and p in latest and latest[p].partly_l2 is False:
                continue          # a row partly served from L2 never replaces one that rotated past it
            latest[p] = Measurement(p, ours, float(row["floor_us"]), src, eager_us=_median(times, "eager"),
                                    compile_us=comp, cublas_us=_median(times, "cublas"),
                                    pair_us=_median(times, pair), launch_floor_us=launch_us,
                                    copy_us=_median(times, "copy"), partly_l2=partly,
                                    compile_functional=comp is not None and functional,
                                    eager_partly_l2=_eager_partly_l2(row, l2))
    for m in latest.values():
        if m.compile_us is None and m.point in compile_at:
            m.compile_us, m.compile_source, m.compile_functional = compile_at[m.point]
        if m.eager_us is None and m.point in eager_at:
            m.eager_us, m.eager_source, m.eager_partly_l2 = eager_at[m.point]
        m.verdicts = judge(op, m)
    measured = [latest[p] for p in sorted(latest)]
    done = {_work(op, p) for p in latest}
    unmeasured = [p for p in in_scope if _work(op, p) not in done]
    cover = {src: (sum(_work(op, p) in w for p in in_scope), sum(_work(op, p) in wc for p in in_scope))
             for src, (w, wc) in runs.items()}
    best = max(reversed(list(cover.items())), key=lambda kv: kv[1], default=("", (0, 0)))   # ties: the newest run
    kept: dict[str, list[str]] = {}
    for pt, cid in sorted(kept_by.items()):
        kept.setdefault(cid, []).append(pt.label())
    return OpCard(op, candidate, measured, unmeasured, len(in_scope), best[0], *best[1], kept_by=kept,
                  same_kernel=sorted(used - {candidate}))


@functools.lru_cache(maxsize=None)
def _work(op: str, p: Point) -> str:
    """The op's tensor shapes at `p`: two points with equal shapes are the same computation
    (the router, add_rmsnorm and attn_res are replicated: TP16 is TP8), and bench_kernels.py
    times such a point once and copies the row."""
    import reference_impls
    from harness.opdef import Point as OpPoint

    defn = reference_impls.get(op)
    point = OpPoint(batch=p.batch, tp=p.tp, shape=p.shape)
    if p.state_dtype:
        point = replace(point, state_dtype=p.state_dtype)
    return json.dumps([defn.shapes(point), p.state_dtype],
                      sort_keys=True, default=str)


def scorecards(root: Path = ROOT, results: Path | None = None, ops: list[str] | None = None,
               files: list[tuple[Path, dict]] | None = None, gpu_name: str = DEFAULT_GPU) -> list[OpCard]:
    """`files`: json_files(results, root, gpu_name) when the caller has read them already."""
    from harness.promotion import kernel_entries, read_manifest

    manifest = read_manifest(root)
    files = json_files(results or root / "results", root, gpu_name) if files is None else files
    tried = kernel_entries(manifest)
    return [card(e["op"], e["candidate"], e["scope"], files, root, kept_by=_kept_by(e, tried[e["op"]]),
                 gpu_name=gpu_name)
            for e in manifest if not ops or e["op"] in ops]


def _kept_by(entry: dict, tried: list[Any]) -> dict[Point, str]:
    """The points of `entry`'s scope where the registry would run another promoted kernel of its
    op (a narrower one) on the H200: point -> that kernel's candidate id. `tried`: the op's
    entries in the order a call tries them (promotion.kernel_entries)."""
    out = {}
    for p in scope_points(entry["scope"]):
        hit = next((k for k in tried if _runs_at(k.scope, p)), None)
        if hit is not None and hit.candidate != entry["candidate"]:
            out[p] = hit.candidate
    return out


@dataclass
class Coverage:
    """Where an op's promoted kernels run at all: the op's sweep (TP 8 and 16, every sweep batch,
    each of its named shapes and state dtypes) against the points where the registry would call one
    of its promoted kernels on the H200. Everything else runs the reference (for skinny_gemm that is
    cuBLAS). A card judges only its own kernel's scope; this says how much of the op that scope is."""
    op: str
    points: int
    covered: int
    shapes: list[str] = field(default_factory=list)            # the op's named shapes ([] for none)
    uncovered_shapes: list[str] = field(default_factory=list)  # named shapes no promoted kernel runs at, at any point
    uncovered_batches: list[int] = field(default_factory=list)  # batches no promoted kernel runs at, at any point


def shape_names(defn: Any) -> list[str]:
    """The named shapes an op declares (skinny_gemm's GEMMs, attn_res's nb1..nb8), [] for none."""
    names = defn.extra.get("shape_names", ())
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else []


def coverage(op: str, tried: list[Any]) -> Coverage:
    """`tried`: the op's promoted entries (promotion.kernel_entries(manifest)[op]). The op's sweep is
    scope_points' default scope (TP 8 and 16, B 1..64) over its named shapes and state dtypes."""
    import reference_impls

    defn = reference_impls.get(op)
    shapes = shape_names(defn)
    sweep = scope_points({"shapes": shapes, "state_dtypes": list(defn.state_dtypes) if len(defn.state_dtypes) > 1 else []})
    on = {p for p in sweep if any(_runs_at(k.scope, p) for k in tried)}
    return Coverage(op, len(sweep), len(on), shapes,
                    [sh for sh in shapes if not any(p.shape == sh for p in on)],
                    [b for b in SWEEP_BATCHES if not any(p.batch == b for p in on)])


def coverage_line(c: Coverage) -> str:
    """One line: how many of the sweep's points run a promoted kernel, and what runs the reference."""
    dims = "TP 8, 16 x B 1..64" + (f" x {len(c.shapes)} shapes" if c.shapes else "")
    line = f"{c.op} coverage: its promoted kernels run at {c.covered} of the {c.points} points of the op's sweep ({dims})"
    if c.covered == c.points:
        return line + ": all of them"
    gaps = []
    if c.uncovered_shapes:
        gaps.append(f"every point of {', '.join(c.uncovered_shapes)}")
    if c.uncovered_batches:
        gaps.append(f"B = {', '.join(map(str, c.uncovered_batches))} at every shape" if c.shapes
                    else f"B = {', '.join(map(str, c.uncovered_batches))}")
    return line + "; the reference runs at the rest" + (f" ({'; '.join(gaps)})" if gaps else "")


def coverages(root: Path = ROOT, ops: list[str] | None = None) -> list[Coverage]:
    """One Coverage per op with a promoted kernel (or per op of `ops`)."""
    from harness.promotion import kernel_entries, read_manifest

    tried = kernel_entries(read_manifest(root))
    return [coverage(op, tried[op]) for op in sorted(tried) if not ops or op in ops]


@dataclass
class LayerRow:
    batch: int
    layer: int
    kind: str
    off_us: float
    on_us: float
    kernels_off: int
    kernels_on: int
    timing: str                       # "graph" (CUDA-graph replay) or "eager"


@dataclass
class LayerTable:
    """The issue's per-layer table: per-layer decode time and GPU kernels with the promoted
    kernels off and on, from the latest scripts/gpu/bench_layers.py run of one model config at
    one context length (the MLA cache rows and KDA states each step reads)."""
    config: str
    source: str
    rows: list[LayerRow]
    kernel_ops: list[str]             # ops whose kernel ran on the "on" side (registry counters)
    candidates: dict[str, str] = field(default_factory=dict)   # op -> candidate id loaded (runs since session 27)
    context: int | None = None        # tokens of context before the timed steps (None: the run did not say)
    promoted_now: dict[str, str] = field(default_factory=dict)  # op -> candidate id promoted today


def layer_tables(root: Path = ROOT, results: Path | None = None,
                 files: list[tuple[Path, dict]] | None = None, gpu_name: str = DEFAULT_GPU) -> list[LayerTable]:
    from harness.promotion import promoted_ids, read_manifest

    files = json_files(results or root / "results", root, gpu_name) if files is None else files
    latest = {(data["config"], data.get("context")): (path, data)                       # oldest first
              for path, data in files if _is_layers(data)}
    promoted_now = promoted_ids(read_manifest(root))
    out = []
    for (config, context), (path, data) in sorted(latest.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        by = {(r["batch"], r["layer"], r["kernels"]): r for r in data["rows"]}
        rows = []
        for b, layer, side in sorted(by):
            if side != "off" or (b, layer, "on") not in by:
                continue
            off, on = by[b, layer, "off"], by[b, layer, "on"]
            graph = off.get("graph_us") is not None and on.get("graph_us") is not None
            t = "graph_us" if graph else "eager_us"
            rows.append(LayerRow(b, layer, f"{off.get('attn', '?')}+{off.get('ffn', '?')}", off[t], on[t],
                                 off.get("gpu_kernels", 0), on.get("gpu_kernels", 0), "graph" if graph else "eager"))
        ran = sorted({k.split()[0] for k in data.get("registry", {}).get("on", {}) if " kernel " in f" {k} "})
        out.append(LayerTable(config, _rel(path, root), rows, ran, candidates=dict(data.get("promoted", {})),
                              promoted_now=promoted_now, context=context))
    return out


def kernel_on(t: LayerTable, op: str) -> str:
    """`op`, or `op id` where the run recorded the candidate it loaded, flagged where that is not
    the candidate promoted now (the table then predates the current kernel)."""
    cand = t.candidates.get(op)
    if cand is None:
        return op
    now = t.promoted_now.get(op)
    return f"{op} {cand}" + (f" (promoted now: {now or 'none'})" if now != cand else "")


def render_layers(t: LayerTable) -> str:
    ops = ", ".join(kernel_on(t, op) for op in t.kernel_ops) or "-"
    ctx = f", context {t.context}" if t.context is not None else ""
    lines = [f"## per layer, {t.config}{ctx}: kernels off vs on ({t.source}; kernels on for {ops})",
             "| B | layer | off us | on us | on/off | kernels off -> on | timing |", "|---" * 7 + "|"]
    lines += [f"| {r.batch} | {r.layer} {r.kind} | {r.off_us:.1f} | {r.on_us:.1f} | {r.on_us / r.off_us:.2f} | "
              f"{r.kernels_off} -> {r.kernels_on} | {r.timing} |" for r in t.rows]
    return "\n".join(lines)


# ---- printing --------------------------------------------------------------------------------------
def _f(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


UNREACHABLE_LEGEND = (f"floor MISS*: unreachable under this timing, floor+launch (the run's empty-kernel time) "
                      f"already exceeds the target ({FLOOR_FACTOR} x floor, or {SMALL_CAP_US:g} us under a "
                      f"{FLOOR_LIMIT_US:g} us floor)")
L2_LEGEND = (f"(L2): the run rotated less than {L2_ROTATION_FACTOR:g} x L2 of this point's inputs, so part of each "
             "call was served from L2 (decode finds the previous sublayer's output there, not kda's state, "
             "attn_res's blocks or the weights)")
EAGER_L2_LEGEND = (f"eager (L2): the eager reference rotated fewer input sets than the kernels (bench_kernels.py "
                   f"--eager-copies), less than {L2_ROTATION_FACTOR:g} x L2 of them; eager is context, no target "
                   "reads it")
BEYOND_COPY_LEGEND = ("floor MISS^: beyond a copy, a plain streaming kernel moving the point's bytes (the run's copy "
                      "column, same timing) already exceeds the target")
FUNCTIONAL_COMPILE_LEGEND = (
    "torch.compile at {n} of {total} points is its functional form (runs before session 37): under CUDA-graph "
    "capture every call reused one L2-resident output block while ours write rotated outputs, which read it "
    "up to 6% fast at small points (results/h200/session37/); later runs time it writing into the same rotated outputs")


def mark(target: str, ok: bool, m: Measurement) -> str:
    if ok:
        return f"{target} ok"
    if target != "floor":
        return f"{target} MISS"
    return "floor MISS" + ("*" if m.reachable is False else "^" if m.beyond_copy else "")


def _floor_misses_note(c: OpCard) -> str:
    unreachable, beyond, reachable, unknown = c.floor_misses()
    missed = unreachable + beyond + reachable + unknown
    from_l2 = c.met_partly_from_l2()
    l2 = f"; {from_l2} of the met partly from L2" if from_l2 else ""
    if not missed:
        return f" ({l2[2:]})" if l2 else ""
    return (f" ({missed} missed: {unreachable} unreachable, {beyond} beyond a copy, {reachable} reachable, "
            f"{unknown} unknown{l2})")


def render(c: OpCard, elsewhere: str = "") -> str:
    """`elsewhere`: for a card without rows, which other card's runs measured it (elsewhere_note)."""
    lines = [f"## {c.op}: promoted {c.candidate}"]
    if not c.measured:
        lines.append(f"no committed benchmark on this card measured this candidate; {elsewhere}" if elsewhere
                     else "no committed benchmark measured this candidate")
    else:
        head = ("| point | eager | torch.compile | cuBLAS [+situ] | ours | floor | floor+launch | copy | ours/floor "
                "| vs compile | targets | source |")
        lines += [head, "|---" * 12 + "|"]
        for m in c.measured:
            vs = "-" if m.compile_us is None else \
                f"{m.compile_us / m.ours_us:.2f}x" + (" (other run)" if m.compile_source else "")
            marks = " ".join(mark(t, ok, m) for t, ok in m.verdicts.items())
            base = m.cublas_us if m.cublas_us is not None else m.pair_us
            eager = (_f(m.eager_us, 1) + (" (L2)" if m.eager_partly_l2 and m.eager_us is not None else "")
                     + (" (other run)" if m.eager_source else ""))
            lines.append(f"| {m.point.label()}{' (L2)' if m.partly_l2 else ''} | {eager} | {_f(m.compile_us)} | {_f(base)} | "
                         f"{_f(m.ours_us)} | {_f(m.floor_us)} | {_f(m.floor_plus_launch_us())} | {_f(m.copy_us)} | "
                         f"{m.ours_us / m.floor_us:.2f} | {vs} | {marks} | {m.source} |")
        unreachable, beyond, *_ = c.floor_misses()
        if unreachable:
            lines.append(UNREACHABLE_LEGEND)
        if beyond:
            lines.append(BEYOND_COPY_LEGEND)
        if any(m.partly_l2 for m in c.measured):
            lines.append(L2_LEGEND)
        if any(m.eager_partly_l2 for m in c.measured):
            lines.append(EAGER_L2_LEGEND)
        if (n := sum(m.compile_functional for m in c.measured)):
            lines.append(FUNCTIONAL_COMPILE_LEGEND.format(n=n, total=len(c.measured)))
    lines += summary_lines(c)
    return "\n".join(lines)


def summary_lines(c: OpCard) -> list[str]:
    """The card's verdict in words: targets met out of judged, the floor misses by kind, the scope
    never measured, and the largest single run (what the dashboard prints under its table too)."""
    summary = [f"{t} met at {a}/{n}" + (_floor_misses_note(c) if t == "floor" else "")
               for t in ("floor", "compile", "cublas", "pair") for a, n in [c.met(t)] if n]
    covered = c.scope_points - len(c.unmeasured)
    shared = f" (covering {covered} scope points: rows of equal shapes stand for each other)" if covered != len(c.measured) else ""
    lines = [f"{c.op}: {len(c.measured)} points measured{shared}; " + ("; ".join(summary) or "nothing judged")
             + f"; {len(c.unmeasured)} of the {c.scope_points} points of its scope never measured"
             + (f" (e.g. {', '.join(p.label() for p in c.unmeasured[:4])})" if c.unmeasured else "")]
    if c.best_run:
        lines.append(f"largest single run: {c.best_run}, {c.best_run_points} of {c.scope_points} scope points, "
                     f"{c.best_run_compile_points} of them with torch.compile")
    for cid, labels in c.kept_by.items():
        lines.append(f"{len(labels)} more points of its scope run the narrower promoted {cid} (its card): "
                     + ", ".join(labels[:4]) + (", ..." if len(labels) > 4 else ""))
    if c.same_kernel:
        lines.append(f"rows of {', '.join(c.same_kernel)} count as its own: the same kernel.py")
    return lines


def measured_elsewhere(cards: list[OpCard], others: dict[str, list[OpCard]]) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """For each of `cards` without rows, the other cards whose runs measured its kernel: (op,
    candidate) -> [(GPUS name, points measured there)]. `others`: GPUS name -> that card's
    scorecards. So a kernel promoted on one card's evidence does not read as never benchmarked."""
    found = {(c.op, c.candidate): [(g, len(o.measured)) for g, oc in others.items() for o in oc
                                   if (o.op, o.candidate) == (c.op, c.candidate) and o.measured]
             for c in cards if not c.measured}
    return {k: v for k, v in found.items() if v}


def elsewhere_note(where: list[tuple[str, int]]) -> str:
    return "; ".join(f"the {g.upper()} runs measured {n} points (harness scorecard --gpu {g})" for g, n in where)


class ScorecardError(ValueError):
    """A user mistake: a results path that is not a folder, an unknown op, an op without a promoted kernel."""


def _check_ops(root: Path, ops: list[str]) -> None:
    """ScorecardError naming the first unknown op (reference_impls.get's message), else every op
    without a promoted kernel."""
    import reference_impls
    from harness.promotion import read_manifest

    for op in ops:
        try:
            reference_impls.get(op)
        except ValueError as exc:
            raise ScorecardError(str(exc)) from None
    promoted = sorted({e["op"] for e in read_manifest(root)})
    missing = [op for op in ops if op not in promoted]
    if missing:
        raise ScorecardError(f"no promoted kernel for {', '.join(missing)} (promoted: {', '.join(promoted) or 'none'})")


def report(root: Path = ROOT, ops: list[str] | None = None, results: Path | None = None,
           as_json: bool = False, gpu_name: str = DEFAULT_GPU) -> str:
    """The scorecard of the runs on `gpu_name` as text (markdown tables) or JSON: every promoted op
    (or `ops`), then the per-layer tables (left out when `ops` narrows it)."""
    gpu_name = gpu_name.lower()                       # --gpu H100 is --gpu h100
    if gpu_name not in GPUS:
        raise ScorecardError(f"no committed runs on {gpu_name!r}: --gpu is one of {', '.join(GPUS)}")
    if results is not None and not results.is_dir():
        raise ScorecardError(f"{results} is not a folder")
    if ops:                               # before any result file is read
        _check_ops(root, ops)
    everything = all_json_files(results.resolve() if results else root / "results", root)   # read once
    files = on_gpu(everything, gpu_name)
    if results is not None and not any(is_bench_run(d) or _is_layers(d) for _, d in files):
        raise ScorecardError(f"{results} holds no benchmark JSON measured on the {gpu_name.upper()} "
                             "(scripts/gpu/bench_kernels.py or bench_layers.py output)")
    cards = scorecards(root, ops=ops, files=files, gpu_name=gpu_name)
    layers = [] if ops else layer_tables(root, files=files, gpu_name=gpu_name)
    if not cards and not layers:
        raise ScorecardError("nothing to judge: no promoted kernel in kernels_generated/promoted.json and no per-layer benchmark")
    covers = {c.op: c for c in coverages(root, ops)}
    others = {g: scorecards(root, ops=ops, files=on_gpu(everything, g), gpu_name=g)
              for g in GPUS if g != gpu_name} if any(not c.measured for c in cards) else {}
    elsewhere = measured_elsewhere(cards, others)
    if as_json:
        return json.dumps({"gpu": gpu_name, "ops": [asdict(c) for c in cards],
                           "coverage": [asdict(c) for c in covers.values()],
                           "layers": [asdict(t) for t in layers],
                           "measured_elsewhere": [{"op": op, "candidate": cand, "gpu": g, "points": n}
                                                  for (op, cand), where in sorted(elsewhere.items())
                                                  for g, n in where]}, indent=1)
    last = {c.op: i for i, c in enumerate(cards)}     # an op's coverage line after its last card
    texts = [render(c, elsewhere_note(elsewhere.get((c.op, c.candidate), [])))
             + (f"\n{coverage_line(covers[c.op])}" if last[c.op] == i and c.op in covers else "")
             for i, c in enumerate(cards)]
    head = f"# scorecard: every number below was measured on the {gpu_name.upper()} (--gpu {gpu_name})"
    return "\n\n".join([head] + texts + [render_layers(t) for t in layers])


def main(argv: list[str] | None = None) -> int:
    """scripts/scorecard.py's entry point (`harness scorecard` is the same through the CLI)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", action="append", help="only this op (repeatable)")
    ap.add_argument("--results", type=Path, default=None, help="folder of benchmark JSONs (default results/)")
    ap.add_argument("--gpu", default=DEFAULT_GPU, help=f"the card whose runs to judge: {', '.join(GPUS)} "
                    f"(default {DEFAULT_GPU})")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        print(report(ROOT, a.op, a.results, a.json, a.gpu))
    except ScorecardError as exc:
        print(f"scorecard: {exc}", file=sys.stderr)
        return 2
    return 0
