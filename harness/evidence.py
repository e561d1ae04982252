"""Evidence records: what one `harness gate` run measured and decided, pinned to the exact
files it judged. Written atomically (temp file, fsync, rename, read-only), never edited.

A record is a dataclass validated explicitly (the GPU machine has no pydantic) and, where
pydantic is installed, through a pydantic TypeAdapter as well. `record_sha256` covers every
other field: a record edited after writing no longer matches it.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gates import ALL_GATES, GateResult, Verdict, gate_code_hash, sha256_files

SCHEMA = 1
EVIDENCE_DIR = "evidence"


class EvidenceError(ValueError):
    """A record that does not parse, validate or match its own hash."""


@dataclass
class Hashes:
    candidate: str          # every file of the candidate folder except evidence/
    kernel: str             # kernel.py bytes
    reference: str          # the op's reference module + shared helpers + the output checker
    definition: str         # OpDefinition.source_hash() of the op
    gate_config: str        # gates/gate_config.toml bytes
    gate_code: str          # gates/*.py + harness/{compare,evidence,promotion}.py


@dataclass
class GateRecord:
    gate: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@dataclass
class EvidenceRecord:
    schema: int
    op: str
    candidate_id: str
    created_utc: str
    host: str
    harness_version: str
    gate_config_version: int
    base_commit: str
    head_commit: str
    hashes: Hashes
    hardware: dict[str, Any]
    gates: list[GateRecord]
    record_sha256: str = ""

    def body(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("record_sha256")
        return d

    def compute_sha256(self) -> str:
        return hashlib.sha256(_canonical(self.body()).encode()).hexdigest()

    def seal(self) -> "EvidenceRecord":
        self.record_sha256 = self.compute_sha256()
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def gate(self, name: str) -> GateRecord | None:
        return next((g for g in self.gates if g.gate == name), None)


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


# ---- validation -------------------------------------------------------------------------
_REQUIRED = {"schema": int, "op": str, "candidate_id": str, "created_utc": str, "host": str,
             "harness_version": str, "gate_config_version": int, "base_commit": str, "head_commit": str,
             "hashes": dict, "hardware": dict, "gates": list, "record_sha256": str}


def from_dict(d: Any) -> EvidenceRecord:
    """Parse and validate; EvidenceError (one line) on anything malformed or tampered."""
    if not isinstance(d, dict):
        raise EvidenceError("record is not a JSON object")
    for key, typ in _REQUIRED.items():
        if key not in d:
            raise EvidenceError(f"record lacks '{key}'")
        if not isinstance(d[key], typ) or (typ is int and isinstance(d[key], bool)):
            raise EvidenceError(f"record field '{key}' must be {typ.__name__}")
    extra = set(d) - set(_REQUIRED)
    if extra:
        raise EvidenceError(f"record has unknown fields {sorted(extra)}")
    if d["schema"] != SCHEMA:
        raise EvidenceError(f"record schema {d['schema']} is not {SCHEMA}")
    try:
        hashes = Hashes(**d["hashes"])
    except TypeError as exc:
        raise EvidenceError(f"record hashes malformed: {exc}") from None
    for k, v in asdict(hashes).items():
        if not (isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)):
            raise EvidenceError(f"record hash '{k}' is not a sha256 hex digest")
    gates = []
    known = {g.value for g in ALL_GATES}
    verdicts = {v.value for v in Verdict}
    for g in d["gates"]:
        try:
            gr = GateRecord(**g)
        except TypeError as exc:
            raise EvidenceError(f"record gate entry malformed: {exc}") from None
        if gr.gate not in known or gr.verdict not in verdicts or not isinstance(gr.numbers, dict) \
                or not isinstance(gr.reasons, list):
            raise EvidenceError(f"record gate entry {gr.gate!r} malformed")
        gates.append(gr)
    rec = EvidenceRecord(**{**d, "hashes": hashes, "gates": gates})
    _pydantic_check(rec)
    if rec.record_sha256 != rec.compute_sha256():
        raise EvidenceError("record content does not match its record_sha256 (edited after writing)")
    return rec


def _pydantic_check(rec: EvidenceRecord) -> None:
    try:
        import pydantic
    except ImportError:
        return                       # the GPU machine: the explicit checks above stand alone
    try:
        pydantic.TypeAdapter(EvidenceRecord).validate_python(rec.to_dict(), strict=False)
    except pydantic.ValidationError as exc:
        raise EvidenceError(f"record fails schema validation: {exc.errors()[0]['msg']}") from None


def load(path: Path) -> EvidenceRecord:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise EvidenceError(f"{path.name}: unreadable ({exc})") from None
    return from_dict(data)


# ---- hashes of the files on disk ---------------------------------------------------------
def current_hashes(root: Path, op: str, candidate_id: str) -> Hashes:
    import reference_impls
    from gates.config import config_path

    cdir = root / "kernels_generated" / op / candidate_id
    cfiles = [p for p in cdir.rglob("*") if p.is_file() and EVIDENCE_DIR not in p.relative_to(cdir).parts[:1]
              and "__pycache__" not in p.parts]
    kernel = cdir / "kernel.py"
    ref_files = [root / "reference_impls" / f"{op}.py", root / "reference_impls" / "_common.py",
                 root / "harness" / "compare.py", root / "harness" / "opdef.py"]
    return Hashes(
        candidate=sha256_files(cfiles, root),
        kernel=hashlib.sha256(kernel.read_bytes() if kernel.is_file() else b"").hexdigest(),
        reference=sha256_files([p for p in ref_files if p.is_file()], root),
        definition=reference_impls.get(op).source_hash(),
        gate_config=hashlib.sha256(config_path(root).read_bytes()).hexdigest(),
        gate_code=gate_code_hash(root),
    )


def hash_mismatches(rec: EvidenceRecord, now: Hashes) -> list[str]:
    return [f"{k} hash differs from the files on disk (evidence {v[:12]}, now {getattr(now, k)[:12]})"
            for k, v in asdict(rec.hashes).items() if v != getattr(now, k)]


# ---- hardware fingerprint --------------------------------------------------------------
def hardware_fingerprint() -> dict[str, Any]:
    """GPU name, SMs, memory, driver, CUDA, torch, cutlass versions, clocks where available."""
    fp: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version(),
                          "platform": platform.platform()}
    try:
        import torch

        fp["torch"] = torch.__version__
        fp["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            fp.update(gpu=p.name, sm_count=p.multi_processor_count, memory_bytes=p.total_memory,
                      capability=f"{p.major}.{p.minor}", gpu_count=torch.cuda.device_count())
    except ImportError:
        pass
    fp["cutlass_dsl"] = _dist_version("nvidia-cutlass-dsl")
    fp.update(_nvidia_smi())
    return fp


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version(name)
    except PackageNotFoundError:
        try:
            import cutlass

            return getattr(cutlass, "__version__", None)
        except ImportError:
            return None


def _nvidia_smi() -> dict[str, Any]:
    q = "driver_version,clocks.max.sm,clocks.max.mem,clocks.sm,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    vals = [v.strip() for v in out.stdout.splitlines()[0].split(",")]
    keys = ["driver", "clock_max_sm_mhz", "clock_max_mem_mhz", "clock_sm_mhz", "power_limit_w"]
    return dict(zip(keys, vals))


# ---- building and writing ----------------------------------------------------------------
def build(root: Path, op: str, candidate_id: str, results: list[GateResult], config_version: int,
          base_commit: str = "", head_commit: str = "", hardware: dict[str, Any] | None = None) -> EvidenceRecord:
    from harness import __version__

    gates = [GateRecord(r.gate, r.verdict.value, list(r.reasons), _jsonable(r.numbers), r.duration_s) for r in results]
    rec = EvidenceRecord(schema=SCHEMA, op=op, candidate_id=candidate_id,
                         created_utc=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                         host=socket.gethostname(), harness_version=__version__,
                         gate_config_version=config_version, base_commit=base_commit, head_commit=head_commit,
                         hashes=current_hashes(root, op, candidate_id),
                         hardware=_jsonable(hardware if hardware is not None else hardware_fingerprint()),
                         gates=gates)
    return rec.seal()


def _jsonable(obj: Any) -> Any:
    from harness.output import to_jsonable

    return json.loads(json.dumps(to_jsonable(obj), allow_nan=False, default=str))


def write(rec: EvidenceRecord, root: Path) -> Path:
    """kernels_generated/<op>/<cid>/evidence/<UTC timestamp>-<host>.json: temp + fsync + rename;
    never overwrites; the file is made read-only."""
    folder = root / "kernels_generated" / rec.op / rec.candidate_id / EVIDENCE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    stamp = rec.created_utc.replace(":", "").replace("-", "").replace("+0000", "Z").replace("+00:00", "Z")
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in rec.host)[:40]
    data = (json.dumps(rec.to_dict(), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
    for n in range(100):
        final = folder / f"{stamp}-{host}{'' if n == 0 else f'-{n}'}.json"
        tmp = folder / f".{final.name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)           # fails if `final` exists: records are never replaced
        except FileExistsError:
            os.unlink(tmp)
            continue
        os.unlink(tmp)
        os.chmod(final, 0o444)
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return final
    raise EvidenceError(f"could not find a free record name in {folder}")


def records(root: Path, op: str, candidate_id: str) -> list[tuple[Path, EvidenceRecord | EvidenceError]]:
    """Every record of a candidate, oldest first; unparsable ones carry their error."""
    folder = root / "kernels_generated" / op / candidate_id / EVIDENCE_DIR
    out: list[tuple[Path, EvidenceRecord | EvidenceError]] = []
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append((p, load(p)))
        except EvidenceError as exc:
            out.append((p, exc))
    return out
