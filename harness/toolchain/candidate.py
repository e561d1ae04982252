"""Candidate folders: kernels_generated/<op>/<id>/{kernel.py, candidate.json}.

The id is content-derived (docs/ARCHITECTURE.md): the first 12 hex digits of
sha256(kernel.py bytes + b"\\0" + canonical JSON of the scope). The folder name is the id,
so a folder whose content changed no longer matches its name and fails to load.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..hardware import TARGET_ARCHS
from ..opdef import BATCH_MAX, BATCH_MIN, TP_DEGREES
from .. import paths

KERNEL_FILE = "kernel.py"
META_FILE = "candidate.json"
_AUTHOR_RE = re.compile(r"^(human|template|llm:[\w.\-]+/[\w.\-:]+)$")


@dataclass(frozen=True)
class Scope:
    """Where a kernel claims to run: outside it the reference runs."""

    archs: tuple[str, ...] = TARGET_ARCHS
    tp: tuple[int, ...] = TP_DEGREES
    batch: tuple[int, int] = (BATCH_MIN, BATCH_MAX)     # inclusive range
    dtypes: tuple[str, ...] = ("bf16",)
    state_dtypes: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"archs": list(self.archs), "tp": list(self.tp), "batch": list(self.batch),
                "dtypes": list(self.dtypes), "state_dtypes": list(self.state_dtypes),
                "shapes": list(self.shapes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Scope":
        if not isinstance(d, dict):
            raise UserError("scope must be an object")
        unknown = set(d) - {"archs", "tp", "batch", "dtypes", "state_dtypes", "shapes"}
        if unknown:
            raise UserError(f"scope has unknown keys {sorted(unknown)}")
        try:
            s = cls(archs=tuple(d.get("archs", TARGET_ARCHS)), tp=tuple(int(t) for t in d.get("tp", TP_DEGREES)),
                    batch=tuple(int(b) for b in d.get("batch", (BATCH_MIN, BATCH_MAX))),  # type: ignore[arg-type]
                    dtypes=tuple(d.get("dtypes", ("bf16",))), state_dtypes=tuple(d.get("state_dtypes", ())),
                    shapes=tuple(d.get("shapes", ())))
        except (TypeError, ValueError) as exc:
            raise UserError(f"malformed scope: {exc}") from None
        s.validate()
        return s

    def validate(self) -> None:
        bad = [a for a in self.archs if a not in TARGET_ARCHS]
        if not self.archs or bad:
            raise UserError(f"scope archs {list(self.archs)} must be a non-empty subset of {list(TARGET_ARCHS)}")
        if not self.tp or any(t not in TP_DEGREES for t in self.tp):
            raise UserError(f"scope tp {list(self.tp)} must be a non-empty subset of {list(TP_DEGREES)}")
        if len(self.batch) != 2 or not BATCH_MIN <= self.batch[0] <= self.batch[1] <= BATCH_MAX:
            raise UserError(f"scope batch {list(self.batch)} must be [lo, hi] within {BATCH_MIN}..{BATCH_MAX}")

    def contains_batch(self, batch: int) -> bool:
        return self.batch[0] <= batch <= self.batch[1]

    def contains(self, point: Any) -> bool:
        """Does this scope cover a harness.opdef.Point (batch, TP, state dtype, named shape)? A
        scope that names no shapes covers only the op's default shape (point.shape == "")."""
        return (self.contains_batch(point.batch) and point.tp in self.tp
                and (not self.state_dtypes or point.state_dtype in self.state_dtypes)
                and (point.shape in self.shapes if self.shapes else point.shape == ""))


@dataclass(frozen=True)
class Provenance:
    author: str = "human"                  # human | template | llm:<provider>/<model>
    parent: str | None = None              # parent candidate id
    prompt_hash: str | None = None
    created_utc: str = ""                  # iso8601
    template: dict[str, Any] | None = None  # {"family": str, "params": {...}}

    def validate(self) -> None:
        if not _AUTHOR_RE.match(self.author or ""):
            raise UserError(f"provenance author '{self.author}' must be human, template or llm:<provider>/<model>")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Provenance":
        if not isinstance(d, dict):
            raise UserError("provenance must be an object")
        unknown = set(d) - {"author", "parent", "prompt_hash", "created_utc", "template"}
        if unknown:
            raise UserError(f"provenance has unknown keys {sorted(unknown)}")
        p = cls(**d)
        p.validate()
        return p


@dataclass(frozen=True)
class Candidate:
    """A loaded, validated candidate folder."""

    op: str
    id: str
    path: Path                  # the folder
    scope: Scope
    provenance: Provenance
    source: str = field(repr=False)

    @property
    def kernel_path(self) -> Path:
        return self.path / KERNEL_FILE

    @property
    def source_hash(self) -> str:
        """sha256 of kernel.py bytes: what evidence and the compile cache pin."""
        return hashlib.sha256(self.source.encode()).hexdigest()


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def candidate_id(source: str | bytes, scope: Scope) -> str:
    """First 12 hex digits of sha256(kernel.py bytes + b"\\0" + canonical JSON of scope)."""
    data = source.encode() if isinstance(source, str) else source
    return hashlib.sha256(data + b"\0" + canonical_json(scope.to_json()).encode()).hexdigest()[:12]


def _check_op(op: str) -> None:
    import reference_impls

    try:
        reference_impls.get(op)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def load_candidate(op: str, ref: str | Path) -> Candidate:
    """Load and validate a candidate: `ref` is an id (under kernels_generated/<op>/), a
    unique id prefix, or a folder path. UserError (one line) on anything malformed."""
    _check_op(op)
    if not str(ref).strip():                 # Path("") is the current folder: never a candidate
        raise UserError(f"empty candidate id of {op} (see `harness candidates {op}`)")
    folder = Path(ref)
    if not folder.is_dir():
        base = paths.kernels_dir() / op
        folder = base / str(ref)
        if not folder.is_dir():
            prefix = str(ref)                    # an id prefix is one path component, taken literally
            is_id = bool(prefix) and Path(prefix).name == prefix
            hits = sorted(p for p in base.iterdir() if p.is_dir() and p.name.startswith(prefix)) \
                if base.is_dir() and is_id else []
            if len(hits) != 1:
                what = "matches several candidates" if hits else "not found"
                raise UserError(f"candidate '{ref}' of {op}: {what} (see `harness candidates {op}`)")
            folder = hits[0]
    folder = folder.resolve()
    kpath, mpath = folder / KERNEL_FILE, folder / META_FILE
    if not kpath.is_file():
        raise UserError(f"{folder}: no {KERNEL_FILE}")
    if not mpath.is_file():
        raise UserError(f"{folder}: no {META_FILE}")
    try:
        source = kpath.read_bytes().decode()
    except UnicodeDecodeError:
        raise UserError(f"{kpath}: not UTF-8 text") from None
    try:
        meta = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{mpath}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(meta, dict):
        raise UserError(f"{mpath}: must hold a JSON object")
    for key in ("op", "id", "scope", "provenance"):
        if key not in meta:
            raise UserError(f"{mpath}: missing key '{key}'")
    if meta["op"] != op:
        raise UserError(f"{mpath}: declares op '{meta['op']}', not '{op}'")
    scope = Scope.from_json(meta["scope"])
    try:
        prov = Provenance.from_json(meta["provenance"])
    except TypeError as exc:
        raise UserError(f"{mpath}: malformed provenance ({exc})") from None
    cid = candidate_id(source, scope)
    if meta["id"] != cid:
        raise UserError(f"{mpath}: id '{meta['id']}' does not match its content (expected {cid}): "
                        "kernel.py or scope changed after creation")
    return Candidate(op=op, id=cid, path=folder, scope=scope, provenance=prov, source=source)


def create_candidate(op: str, source: str, scope: Scope, provenance: Provenance,
                     root: Path | None = None) -> Candidate:
    """Write kernels_generated/<op>/<id>/ atomically (temp folder + rename) and return it.
    Idempotent: the same source and scope give the same id; an existing folder is reused.
    `root` defaults to paths.kernels_dir(). Does not run static checks (call
    `check_source` first if you want to refuse bad code before it lands on disk)."""
    _check_op(op)
    scope.validate()
    if not provenance.created_utc:
        provenance = Provenance(provenance.author, provenance.parent, provenance.prompt_hash,
                                datetime.now(timezone.utc).isoformat(timespec="seconds"), provenance.template)
    provenance.validate()
    cid = candidate_id(source, scope)
    base = (root or paths.kernels_dir()) / op
    final = base / cid
    if final.is_dir():
        return load_candidate(op, final)
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{cid}.{uuid.uuid4().hex}"   # mkdir, not mkdtemp: the umask's mode (mkdtemp's 0700 kept drafts from the group)
    tmp.mkdir()
    (tmp / KERNEL_FILE).write_text(source)
    meta = {"op": op, "id": cid, "scope": scope.to_json(), "provenance": asdict(provenance)}
    (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    try:
        os.rename(tmp, final)
    except OSError:                          # another writer won the race: same content
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return load_candidate(op, final)


@dataclass(frozen=True)
class CandidateScan:
    """Every candidate folder of an op: the loadable ones, oldest first, and the ones that are
    not, each with the one-line reason `load_candidate` gives."""

    candidates: list[Candidate]
    unreadable: list[tuple[Path, str]]


def scan_candidates(op: str, root: Path | None = None) -> CandidateScan:
    """Load every candidate folder of `op` under `root` (default paths.kernels_dir()); hidden
    folders (in-flight writes of create_candidate) and __pycache__ are not candidates."""
    _check_op(op)
    base = (root or paths.kernels_dir()) / op
    good: list[Candidate] = []
    bad: list[tuple[Path, str]] = []
    for p in sorted(base.iterdir()) if base.is_dir() else []:
        if not p.is_dir() or p.name.startswith(".") or p.name == "__pycache__":
            continue
        try:
            good.append(load_candidate(op, p))
        except UserError as exc:
            bad.append((p, str(exc)))
    return CandidateScan(sorted(good, key=lambda c: (c.provenance.created_utc, c.id)), bad)


def list_candidates(op: str, root: Path | None = None) -> list[Candidate]:
    """Every loadable candidate of `op`, oldest first. Folders that do not load are left out:
    `scan_candidates` names them with the reason."""
    return scan_candidates(op, root).candidates
