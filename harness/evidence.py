"""Evidence records: what one `harness gate` run measured and decided, pinned to the exact
files it judged. Written atomically (temp file, fsync, rename, read-only), never edited.

A record is a dataclass validated explicitly (the GPU machine has no pydantic) and, where
pydantic is installed, through a pydantic TypeAdapter as well. `record_sha256` covers every
other field: a record edited after writing no longer matches it.

Pins (schema 2). The record-level hashes pin the candidate, its op's reference and definition,
and the gate config; every gate entry pins its own code (`GateRecord.code_sha256`, over the
files `gates.pins.gate_code_pins` lists for that gate), and `gate_code_files` keeps each pinned
file's own sha256 so a stale verdict can name the file that changed. `stale_reasons` says, per
gate, why a record no longer stands for the files on disk: an edit to the perf gate's timing
makes perf_sweep's verdicts stale and leaves the model evals' standing. Schema 1 records (one
hash over a fixed list of gate files, which missed modules the gates import) still load, and
every verdict in them is stale.
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

from gates import ALL_GATES, GateResult, Verdict
from gates.pins import gate_code_pins, sha256_files

SCHEMA = 2
LEGACY_SCHEMAS = (1,)      # loaded and shown; every verdict in them is stale
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
    gate_code: str | None = None   # schema 1 only: one hash over gates/*.py + a fixed list


@dataclass
class GateRecord:
    gate: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    code_sha256: str = ""   # schema 2: gates.pins.gate_code_pins(root)[gate].code_sha256


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
    gate_code_files: dict[str, str] = field(default_factory=dict)   # schema 2: pinned path -> sha256
    record_sha256: str = ""

    def body(self) -> dict[str, Any]:
        d = self.to_dict()
        d.pop("record_sha256")
        return d

    def compute_sha256(self) -> str:
        return hashlib.sha256(_canonical(self.body()).encode()).hexdigest()

    def seal(self) -> "EvidenceRecord":
        self.record_sha256 = self.compute_sha256()
        return self

    def to_dict(self) -> dict[str, Any]:
        """The record as written: each schema's own fields only (a schema 1 record's hash was
        computed without the fields schema 2 added)."""
        d = asdict(self)
        if self.schema in LEGACY_SCHEMAS:
            d.pop("gate_code_files")
            for g in d["gates"]:
                g.pop("code_sha256")
        else:
            d["hashes"].pop("gate_code")
        return d

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
    legacy = d["schema"] in LEGACY_SCHEMAS
    if d["schema"] != SCHEMA and not legacy:
        raise EvidenceError(f"record schema {d['schema']} is not {SCHEMA}")
    allowed = set(_REQUIRED) | (set() if legacy else {"gate_code_files"})
    extra = set(d) - allowed
    if extra:
        raise EvidenceError(f"record has unknown fields {sorted(extra)}")
    if not legacy and not isinstance(d.get("gate_code_files"), dict):
        raise EvidenceError("record field 'gate_code_files' must be dict")
    if ("gate_code" in d["hashes"]) != legacy:
        raise EvidenceError(f"record hashes {'lack' if legacy else 'have'} 'gate_code' (schema {d['schema']})")
    try:
        hashes = Hashes(**d["hashes"])
    except TypeError as exc:
        raise EvidenceError(f"record hashes malformed: {exc}") from None
    for k, v in asdict(hashes).items():
        if (v is not None or legacy) and not _is_sha256(v):
            raise EvidenceError(f"record hash '{k}' is not a sha256 hex digest")
    for path, v in (d.get("gate_code_files") or {}).items():
        if not (isinstance(path, str) and _is_sha256(v)):
            raise EvidenceError(f"record gate_code_files entry {path!r} is not a path and a sha256 hex digest")
    gates = []
    known = {g.value for g in ALL_GATES}
    verdicts = {v.value for v in Verdict}
    for g in d["gates"]:
        if not isinstance(g, dict) or ("code_sha256" in g) == legacy:
            raise EvidenceError(f"record gate entry {g.get('gate') if isinstance(g, dict) else g!r}: "
                                f"code_sha256 {'not allowed' if legacy else 'missing'} (schema {d['schema']})")
        try:
            gr = GateRecord(**g)
        except TypeError as exc:
            raise EvidenceError(f"record gate entry malformed: {exc}") from None
        if gr.gate not in known or gr.verdict not in verdicts or not isinstance(gr.numbers, dict) \
                or not isinstance(gr.reasons, list) or not (legacy or _is_sha256(gr.code_sha256)):
            raise EvidenceError(f"record gate entry {gr.gate!r} malformed")
        gates.append(gr)
    rec = EvidenceRecord(**{**d, "hashes": hashes, "gates": gates})
    _pydantic_check(rec)
    if rec.record_sha256 != rec.compute_sha256():
        raise EvidenceError("record content does not match its record_sha256 (edited after writing)")
    return rec


def _is_sha256(v: Any) -> bool:
    return isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v)


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


# ---- pins of the files on disk -----------------------------------------------------------
@dataclass
class Pins:
    """What a record made now would pin: the record-level hashes, each gate's code hash and the
    sha256 of every file some gate's code pin covers."""

    hashes: Hashes
    gate_code: dict[str, str]            # gate -> sha256 over its pinned files
    gate_code_files: dict[str, str]      # repo-relative path -> sha256 of the file
    gate_files: dict[str, list[str]]     # gate -> the repo-relative paths it pins


def current_pins(root: Path, op: str, candidate_id: str) -> Pins:
    import reference_impls
    from gates.config import config_path

    cdir = root / "kernels_generated" / op / candidate_id
    cfiles = [p for p in cdir.rglob("*") if p.is_file() and EVIDENCE_DIR not in p.relative_to(cdir).parts[:1]
              and "__pycache__" not in p.parts]
    kernel = cdir / "kernel.py"
    ref_files = [root / "reference_impls" / f"{op}.py", root / "reference_impls" / "_common.py",
                 root / "harness" / "compare.py", root / "harness" / "opdef.py"]
    hashes = Hashes(
        candidate=sha256_files(cfiles, root),
        kernel=hashlib.sha256(kernel.read_bytes() if kernel.is_file() else b"").hexdigest(),
        reference=sha256_files([p for p in ref_files if p.is_file()], root),
        definition=reference_impls.get(op).source_hash(),
        gate_config=hashlib.sha256(config_path(root).read_bytes()).hexdigest(),
    )
    code = gate_code_pins(root)
    return Pins(hashes=hashes,
                gate_code={g: c.code_sha256 for g, c in code.items()},
                gate_code_files={f: h for c in code.values() for f, h in c.file_sha256.items()},
                gate_files={g: list(c.files) for g, c in code.items()})


def hash_mismatches(rec: EvidenceRecord, now: Pins) -> list[str]:
    """Record-level pins (candidate, kernel, reference, definition, gate config) that differ."""
    return [f"{k} hash differs from the files on disk (evidence {v[:12]}, now {getattr(now.hashes, k)[:12]})"
            for k, v in asdict(rec.hashes).items() if k != "gate_code" and v != getattr(now.hashes, k)]


def stale_reasons(rec: EvidenceRecord, now: Pins) -> dict[str, list[str]]:
    """For each gate of the record, why its verdict no longer stands for the files on disk
    (an empty list: it still does)."""
    common = hash_mismatches(rec, now)
    if rec.schema in LEGACY_SCHEMAS:
        common = common + [f"record schema {rec.schema} pins the gate code in one hash that misses modules "
                           "the gates import; gate it again to pin each gate's code"]
        return {g.gate: list(common) for g in rec.gates}
    out = {}
    for g in rec.gates:
        reasons = list(common)
        if g.code_sha256 != now.gate_code.get(g.gate):
            reasons.append(f"{g.gate} code hash differs from the files on disk ({_code_diff(rec, now, g.gate)})")
        out[g.gate] = reasons
    return out


def _code_diff(rec: EvidenceRecord, now: Pins, gate: str) -> str:
    """Which of the gate's pinned files changed, or are pinned now and were not then."""
    was = rec.gate_code_files
    changed = sorted(p for p in now.gate_files[gate] if p in was and was[p] != now.gate_code_files[p])
    added = sorted(p for p in now.gate_files[gate] if p not in was)
    parts = [f"{label}: {', '.join(paths[:3])}{' ...' if len(paths) > 3 else ''}"
             for label, paths in (("changed", changed), ("now pinned too", added)) if paths]
    return "; ".join(parts) or "a file it pinned is no longer pinned"


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

    pins = current_pins(root, op, candidate_id)
    gates = [GateRecord(r.gate, r.verdict.value, list(r.reasons), _jsonable(r.numbers), r.duration_s,
                        code_sha256=pins.gate_code[r.gate]) for r in results]
    pinned = sorted({p for r in results for p in pins.gate_files[r.gate]})
    rec = EvidenceRecord(schema=SCHEMA, op=op, candidate_id=candidate_id,
                         created_utc=datetime.now(timezone.utc).isoformat(timespec="microseconds"),
                         host=socket.gethostname(), harness_version=__version__,
                         gate_config_version=config_version, base_commit=base_commit, head_commit=head_commit,
                         hashes=pins.hashes,
                         hardware=_jsonable(hardware if hardware is not None else hardware_fingerprint()),
                         gates=gates, gate_code_files={p: pins.gate_code_files[p] for p in pinned})
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
