"""Differential check of the registry (harness/registry.py) between this checkout and another:
the same seeded sequence of calls goes through each one's `Registry`, and every decision is
recorded and compared. A change to the registry is pinned by every gate but isolation and static
(gates/pins.py), so it costs a re-gate of every promoted kernel on the GPU; this shows on the CPU,
first, that the change keeps every routing decision and every buffer a kernel is handed.

    python scripts/registry_diff.py OTHER [--ops OP ...] [--points N] [--json]

OTHER is a checkout's folder or a git revision of this one (checked out into a temporary
worktree, removed afterwards). The call sequence is this script's; the registry, the op
definitions (reference_impls/) and the rest of harness/ are each checkout's own, so a change to
an op's shapes or reference shows up here too. Exit 0 when every record matches, 1 when one differs, 2 on a
usage error.

Per op, for each of a few scopes (broad, TP8 with small batches, bf16 state, two entries of
which one is narrowed to a named shape, another arch only), `--points` seeded points (batch,
TP, state dtype, named shape, context) and a few malformed variants of each call's tensors (an
input dropped, one dim too many, the last dim one short, fp16 activations, the other state
dtype), each call made twice (the second one meets whatever the first memoised). A record holds
`selects_kernel`'s answer, the counters (outcome, reason), the tensors the kernel was handed
(name, shape, dtype, strides), what `run` returned (name, shape, dtype, whether it is an input
tensor) or the exception it raised, and which candidate ran. Then a kernel that raises (ERROR,
then no longer selected) and the HARNESS_DISABLE_KERNELS kill switch.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
OPS_ALL = "all"
_KERNEL_SEEN: list[list[tuple]] = []


def _kernel(**tensors: Any) -> None:
    """A kernel that writes nothing and remembers what it was handed."""
    _KERNEL_SEEN.append(sorted((k, tuple(v.shape), str(v.dtype), tuple(v.stride())) for k, v in tensors.items()))


def _raising_kernel(**tensors: Any) -> None:
    raise RuntimeError("this kernel always fails")


def _points(defn: Any, point_cls: Any) -> Iterator[Any]:
    shapes = list(defn.extra.get("shape_names", ())) or [""]
    named = shapes[:4] + ([""] if shapes != [""] else [])
    for batch in (1, 2, 7, 64):
        for tp in (8, 16):
            for state_dtype in defn.state_dtypes:
                for shape in named:
                    for context in ((1, 100, 4096) if defn.uses_context else (0,)):
                        yield point_cls(batch=batch, tp=tp, context=context, state_dtype=state_dtype, shape=shape)


def _variants(defn: Any, inputs: dict, rng: random.Random, role: Any, torch: Any) -> Iterator[tuple[str, dict]]:
    """The call as made, then malformed copies of it."""
    yield "as_is", dict(inputs)
    names = list(inputs)
    name = rng.choice(names)
    yield f"drop:{name}", {k: v for k, v in inputs.items() if k != name}
    name = rng.choice(names)
    yield f"extra_dim:{name}", {**inputs, name: inputs[name].unsqueeze(0)}
    name = rng.choice(names)
    if inputs[name].dim() and inputs[name].shape[-1] > 1:
        yield f"last_dim_short:{name}", {**inputs, name: inputs[name][..., :-1]}
    acts = [s.name for s in defn.inputs if s.role is role.ACTIVATION and s.name in inputs]
    if acts and inputs[acts[0]].is_floating_point():
        yield f"fp16:{acts[0]}", {**inputs, acts[0]: inputs[acts[0]].half()}
    for s in defn.inputs:
        if s.role is role.STATE and s.name in inputs:
            t = inputs[s.name]
            yield f"other_state_dtype:{s.name}", {**inputs, s.name: t.bfloat16() if t.dtype == torch.float32 else t.float()}


def _scopes(defn: Any, scope_cls: Any) -> Iterator[tuple[str, list]]:
    shapes = list(defn.extra.get("shape_names", ()))
    broad = scope_cls(archs=("cpu",), tp=(), batch=(1, 64), dtypes=("bf16",))
    yield "broad", [broad]
    yield "tp8_small", [scope_cls(archs=("cpu",), tp=(8,), batch=(1, 8), dtypes=("bf16",))]
    if len(defn.state_dtypes) > 1:
        yield "bf16_state", [scope_cls(archs=("cpu",), tp=(), batch=(1, 64), dtypes=("bf16",), state_dtypes=("bf16",))]
    if shapes:
        yield "broad+narrow", [broad, scope_cls(archs=("cpu",), tp=(16,), batch=(1, 64), dtypes=("bf16",),
                                                shapes=(shapes[0],))]
    yield "other_arch", [scope_cls(archs=("sm_90a",), tp=(), batch=(1, 64), dtypes=("bf16",))]


def record(ops: list[str], n_points: int) -> list[list[Any]]:
    """The records of the call sequence through the imported registry (the child's main puts its
    checkout first on sys.path before anything of the project is imported)."""
    import torch

    import reference_impls
    from harness.opdef import Point, Role
    from harness.registry import KernelScope, Registry

    def counts(reg: Any) -> list:
        return sorted((k.outcome.value, k.reason.value, n) for k, n in reg.counters().items())

    def returned(outs: dict, inputs: dict) -> list:
        return [(k, tuple(v.shape), str(v.dtype), any(v is t for t in inputs.values())) for k, v in sorted(outs.items())]

    rng = random.Random(20261205)
    rows: list[list[Any]] = []
    for op in ops:
        defn = reference_impls.get(op)
        points = list(_points(defn, Point))
        rng.shuffle(points)
        for scope_name, scopes in _scopes(defn, KernelScope):
            reg = Registry()
            for i, scope in enumerate(scopes):
                reg.register(op, scope, _kernel, candidate=f"entry{i}")
            for point in points[:n_points]:
                static = {"shape": point.shape} if point.shape else {}
                inputs = defn.make_inputs(point, torch.Generator().manual_seed(0), "cpu")
                for variant, call_inputs in _variants(defn, inputs, rng, Role, torch):
                    for attempt in (1, 2):
                        _KERNEL_SEEN.clear()
                        reg.reset_counters()
                        try:
                            selected: Any = reg.selects_kernel(op, call_inputs, tp=point.tp, **static)
                            result: Any = returned(reg.run(op, call_inputs, tp=point.tp, **static), call_inputs)
                        except Exception as exc:          # the reference refusing a malformed call
                            selected, result = None, f"{type(exc).__name__}: {str(exc)[:100]}"
                        rows.append([op, scope_name, point.label(), point.state_dtype, variant, attempt, selected,
                                     counts(reg), result, list(_KERNEL_SEEN),
                                     sorted(reg.candidate_counters().items()), sorted(reg.errors())])
    for op in [o for o in ("moe_router", "kda_decode", "attn_res") if o in ops]:
        defn = reference_impls.get(op)
        reg = Registry()
        reg.register(op, KernelScope(archs=("cpu",), tp=(), batch=(1, 64), dtypes=("bf16",)), _raising_kernel)
        inputs = defn.make_inputs(Point(batch=2), torch.Generator().manual_seed(0), "cpu")
        for attempt in (1, 2):
            selected = reg.selects_kernel(op, inputs, tp=8)
            result = returned(reg.run(op, inputs, tp=8), inputs)
            rows.append([op, "raising_kernel", attempt, selected, counts(reg), result, sorted(reg.errors().items())])
    if "kda_decode" in ops:
        defn = reference_impls.get("kda_decode")
        inputs = defn.make_inputs(Point(batch=2), torch.Generator().manual_seed(0), "cpu")
        with mock.patch.dict(os.environ):             # the kill switch's value restored afterwards
            for value in ("kda_decode", "all", "no_such_op", "moe_router,kda_decode", ""):
                os.environ["HARNESS_DISABLE_KERNELS"] = value
                reg = Registry()
                reg.register("kda_decode", KernelScope(archs=("cpu",), tp=(), batch=(1, 64), dtypes=("bf16",)), _kernel)
                reg.run("kda_decode", inputs, tp=8)
                rows.append(["kda_decode", "env", value, counts(reg), sorted(reg.errors().items())])
    return rows


def compare(mine: list, theirs: list) -> list[dict[str, Any]]:
    """Where the two record lists differ: one entry per differing index (a missing record is None)."""
    out = []
    for i in range(max(len(mine), len(theirs))):
        a = mine[i] if i < len(mine) else None
        b = theirs[i] if i < len(theirs) else None
        if a != b:
            out.append({"index": i, "this": a, "other": b})
    return out


def _record_in_child(root: Path, ops: list[str], n_points: int, out: Path) -> None:
    """Records taken in a fresh interpreter, so each checkout's modules are its own."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--record-into", str(out), "--root", str(root),
           "--points", str(n_points), "--ops", *ops]
    got = subprocess.run(cmd, capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"registry_diff: recording through {root} failed:\n{got.stderr[-2000:]}")


def _other_root(other: str, tmp: Path) -> Path:
    """`other` as a folder, else a git revision of this checkout checked out under `tmp`."""
    path = Path(other)
    if (path / "harness" / "registry.py").is_file():
        return path.resolve()
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{other}^{{commit}}"],
                         capture_output=True, text=True)
    if rev.returncode != 0:
        raise SystemExit(f"registry_diff: '{other}' is neither a checkout (no harness/registry.py there) "
                         "nor a git revision of this one")
    tree = tmp / "other"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev.stdout.strip()],
                   check=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("other", nargs="?", help="another checkout's folder, or a git revision of this one")
    ap.add_argument("--ops", nargs="+", default=[OPS_ALL], help="ops to call (default: every op)")
    ap.add_argument("--points", type=int, default=10, help="seeded points per op and scope (default 10)")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    ap.add_argument("--record-into", type=Path, help=argparse.SUPPRESS)     # the child's mode
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.points < 1:
        ap.error("--points must be >= 1")
    sys.path.insert(0, str(args.root if args.record_into is not None else ROOT))
    import reference_impls

    ops = list(reference_impls.OP_NAMES) if args.ops == [OPS_ALL] else args.ops
    unknown = [o for o in ops if o not in reference_impls.OP_NAMES]
    if unknown:
        ap.error(f"unknown op(s) {', '.join(unknown)} (known: {', '.join(reference_impls.OP_NAMES)})")
    if args.record_into is not None:
        import harness.registry

        for mod in (reference_impls, harness.registry):
            if mod.__file__ is None or args.root.resolve() not in Path(mod.__file__).resolve().parents:
                raise SystemExit(f"registry_diff: imported {mod.__name__} from {mod.__file__}, not from {args.root}")
        args.record_into.write_text(json.dumps(record(ops, args.points), default=str))
        return 0
    if args.other is None:
        ap.error("name the other checkout or git revision")
    with tempfile.TemporaryDirectory(prefix="registry_diff_") as tmp_name:
        tmp = Path(tmp_name)
        other = _other_root(args.other, tmp)
        try:
            for root, name in ((ROOT, "this.json"), (other, "other.json")):
                t0 = time.monotonic()
                print(f"registry_diff: recording {len(ops)} op(s) through {root} ...", file=sys.stderr, flush=True)
                _record_in_child(root, ops, args.points, tmp / name)
                print(f"registry_diff: ... done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        finally:
            if other.parent == tmp:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=False)
        mine = json.loads((tmp / "this.json").read_text())
        theirs = json.loads((tmp / "other.json").read_text())
    diffs = compare(mine, theirs)
    kernel_calls = sum(1 for r in mine if len(r) == 12 and r[9])
    if args.json:
        print(json.dumps({"records": len(mine), "kernel_calls": kernel_calls, "differences": len(diffs),
                          "first": diffs[:20]}, indent=1, default=str))
    else:
        print(f"{len(mine)} records ({kernel_calls} reached a kernel) through this checkout, "
              f"{len(theirs)} through {args.other}: {len(diffs)} differ")
        for d in diffs[:10]:
            print(f"  #{d['index']}\n    this:  {d['this']}\n    other: {d['other']}")
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main())
