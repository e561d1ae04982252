"""Checking a kernel's outputs against the reference's, with each output's tolerance kind.

Used by `harness eval`, the numerics gate and the model-level evaluation alike, so that
"correct" means one thing everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, cast

import torch

from .opdef import CheckKind, OpDefinition, Tolerance


@dataclass
class TensorCheck:
    name: str
    ok: bool
    kind: str
    max_abs_err: float = 0.0
    rel_norm_err: float = 0.0
    nan_count: int = 0
    mismatches: int = 0
    worst: list[dict] = field(default_factory=list)   # up to 5 worst elements: index, got, want
    reason: str = ""


@dataclass
class CompareResult:
    ok: bool
    tensors: dict[str, TensorCheck]

    def summary(self) -> str:
        bad = [t for t in self.tensors.values() if not t.ok]
        if not bad:
            return "all outputs within tolerance"
        return "; ".join(f"{t.name}: {t.reason}" for t in bad)


def _worst(got: torch.Tensor, want: torch.Tensor, n: int = 5) -> list[dict]:
    diff = (got.double() - want.double()).abs().nan_to_num(float("inf")).flatten()
    k = min(n, diff.numel())
    if k == 0:
        return []
    vals, idx = torch.topk(diff, k)
    out = []
    for v, i in zip(vals.tolist(), idx.tolist()):
        pos = list(torch.unravel_index(torch.tensor(i), got.shape))
        out.append({"index": [int(p) for p in pos], "got": float(got.flatten()[i]),
                    "want": float(want.flatten()[i]), "abs_err": v})
    return out


def check_tensor(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance,
                 key: torch.Tensor | None = None) -> TensorCheck:
    """One output against its reference. `key` is the selection key for TOPK_IDS."""
    got, want = got.detach().cpu(), want.detach().cpu()
    if tuple(got.shape) != tuple(want.shape):
        return TensorCheck(name, False, tol.kind.value, reason=f"shape {tuple(got.shape)} != {tuple(want.shape)}")
    if got.dtype != want.dtype:
        return TensorCheck(name, False, tol.kind.value, reason=f"dtype {got.dtype} != {want.dtype}")
    if tol.kind is CheckKind.TOPK_IDS:
        return _check_topk_ids(name, got, want, tol, key)
    if tol.kind is CheckKind.EXACT:
        neq = (got != want)
        n = int(neq.sum())
        return TensorCheck(name, n == 0, tol.kind.value, mismatches=n,
                           worst=_worst(got, want) if n else [], reason=f"{n} elements differ" if n else "")
    g, w = got.double(), want.double()
    nan = int((~torch.isfinite(g)).sum())
    err = (g - w).abs()
    max_abs = float(err.nan_to_num(float("inf")).max()) if err.numel() else 0.0
    denom = float(w.norm()) or 1.0
    rel = float((g - w).nan_to_num(float("inf")).norm()) / denom if err.numel() else 0.0
    if nan:
        return TensorCheck(name, False, tol.kind.value, max_abs, rel, nan, nan, _worst(got, want),
                           f"{nan} non-finite elements (unwritten output or overflow)")
    if tol.kind is CheckKind.REL_NORM:
        ok = rel <= tol.rtol
        return TensorCheck(name, ok, tol.kind.value, max_abs, rel, 0, 0 if ok else err.numel(),
                           [] if ok else _worst(got, want), "" if ok else f"relative error {rel:.3g} > {tol.rtol:g}")
    bad = err > (tol.atol + tol.rtol * w.abs())
    n = int(bad.sum())
    return TensorCheck(name, n == 0, tol.kind.value, max_abs, rel, 0, n, _worst(got, want) if n else [],
                       f"{n} elements outside atol={tol.atol:g} rtol={tol.rtol:g} (max abs err {max_abs:.3g})" if n else "")


def _check_topk_ids(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance,
                    key: torch.Tensor | None) -> TensorCheck:
    """Per row the id sets must match, except that ids whose selection key ties the k-th
    largest key (within tol.atol) may be exchanged for one another. Duplicates fail."""
    bad_rows = []
    for r in range(got.shape[0]):
        g = got[r].tolist()
        w = want[r].tolist()
        if len(set(g)) != len(g):
            bad_rows.append((r, "duplicate ids"))
            continue
        if any(i < 0 or (key is not None and i >= key.shape[-1]) for i in g):
            bad_rows.append((r, "id out of range"))
            continue
        extra, missing = set(g) - set(w), set(w) - set(g)
        if not extra:
            continue
        if key is None:
            bad_rows.append((r, f"ids {sorted(extra)} not chosen by the reference"))
            continue
        kth = key[r, want[r].long()].min().item()
        tie = lambda i: abs(key[r, i].item() - kth) <= tol.atol  # noqa: E731
        if not all(tie(i) for i in extra | missing):
            bad_rows.append((r, f"ids {sorted(extra)} instead of {sorted(missing)}"))
    n = len(bad_rows)
    worst = [{"row": r, "why": why} for r, why in bad_rows[:5]]
    return TensorCheck(name, n == 0, tol.kind.value, mismatches=n, worst=worst,
                       reason=f"{n} rows choose other experts ({bad_rows[0][1]} in row {bad_rows[0][0]})" if n else "")


def _ids_sort(ids: torch.Tensor) -> torch.Tensor:
    return ids.long().argsort(dim=-1)


def _tie_swapped_rows(got_ids: torch.Tensor, want_ids: torch.Tensor) -> list[int]:
    """Rows whose id sets differ: after a passing TOPK_IDS check, only by tied ids."""
    return [r for r, (g, w) in enumerate(zip(got_ids.tolist(), want_ids.tolist())) if set(g) != set(w)]


def compare(defn: OpDefinition, outputs: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor],
            inputs: Mapping[str, torch.Tensor] | None = None) -> CompareResult:
    """Check every output the definition declares. Outputs that go with top-k ids are compared
    by id: both sides are sorted by expert id before the elementwise check.

    A row whose ids differ from the reference's only by ties (the ids check passed) is held to
    the definition's `outputs_for_ids` for the kernel's own ids, where it declares one: two tied
    selection keys may hide different values (moe_router's key adds a per-expert bias that its
    weights leave out), so the reference's values for the other expert would be the wrong bar."""
    checks: dict[str, TensorCheck] = {}
    key = None
    sel = cast("Callable[[dict[str, torch.Tensor]], torch.Tensor] | None", defn.extra.get("selection_key"))
    if sel is not None and inputs is not None:
        key = sel(dict(inputs))
    ids_name = next((n for n, t in defn.tolerances.items() if t.kind is CheckKind.TOPK_IDS), None)
    if ids_name and ids_name in outputs:
        checks[ids_name] = check_tensor(ids_name, outputs[ids_name], reference[ids_name],
                                        defn.tolerances[ids_name], key=key)
    got_ids = outputs[ids_name].detach().cpu() if ids_name in checks else None
    own: Mapping[str, torch.Tensor] = {}
    tie_rows: list[int] = []
    for_ids = cast("Callable[[dict[str, torch.Tensor], torch.Tensor], Mapping[str, torch.Tensor]] | None",
                   defn.extra.get("outputs_for_ids"))
    if ids_name is not None and got_ids is not None and checks[ids_name].ok and for_ids is not None \
            and inputs is not None:
        tie_rows = _tie_swapped_rows(got_ids, reference[ids_name].detach().cpu())
        if tie_rows:
            own = {n: t.detach().cpu() for n, t in for_ids(dict(inputs), outputs[ids_name]).items()}
    for spec in defn.outputs:
        name = spec.name
        if name in checks:
            continue
        if name not in outputs:
            checks[name] = TensorCheck(name, False, defn.tolerances[name].kind.value, reason="output missing")
            continue
        got, want = outputs[name].detach().cpu(), reference[name].detach().cpu()
        tol = defn.tolerances[name]
        if ids_name is not None and got_ids is not None and tol.kind is not CheckKind.TOPK_IDS \
                and tuple(got.shape) == tuple(got_ids.shape):
            order = _ids_sort(got_ids)
            got = got.gather(-1, order)
            want = want.gather(-1, _ids_sort(reference[ids_name].detach().cpu()))
            if name in own:
                want[tie_rows] = own[name].gather(-1, order)[tie_rows].to(want.dtype)
        checks[name] = check_tensor(name, got, want, tol, key=key if tol.kind is CheckKind.TOPK_IDS else None)
    checks = {spec.name: checks[spec.name] for spec in defn.outputs}     # the definition's order
    return CompareResult(all(c.ok for c in checks.values()), checks)
