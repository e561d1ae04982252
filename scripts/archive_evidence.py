"""Move the evidence records of candidates no longer promoted out of the tree the GPU runs carry.

    python scripts/archive_evidence.py OP ID [ID ...] [--dry-run]
    python scripts/archive_evidence.py OP ID [ID ...] --stale [--dry-run]

The lent GPU machine receives the tracked tree plus `.device` (the CuTe DSL toolchain, ~56 MiB)
within a 64 MiB limit, so every evidence record in kernels_generated/ (100-600 KB each) takes
room from future gate runs. A record matters to `harness promote` and `harness ci verify` only
while its candidate is promoted (or about to be); superseded candidates' records are history.
This compresses each record of the named candidates byte for byte into
results/evidence_archive/<op>/<id>/<record>.json.xz (`xz -dc` gives back the original, so its
record_sha256 still checks) and removes the original. A promoted candidate is refused. Commit
the result yourself (`git add -A kernels_generated results/evidence_archive`).

`--stale` archives only the records whose hashes (gate code, reference, candidate, ...) no longer
match the files on disk, of any candidate, promoted ones too: `harness promote` and `harness ci
verify` skip such records whenever a current one exists, so after a re-gate they are history.
A stale record is kept while it is the only record of some gate (the "evidence is stale" hint
`ci verify` prints for that gate comes from it).
"""
from __future__ import annotations

import argparse
import lzma
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.promotion import read_manifest  # noqa: E402

ARCHIVE_REL = Path("results/evidence_archive")


@dataclass(frozen=True)
class Archived:
    record: Path           # the original, removed
    archive: Path          # its .xz copy
    bytes_before: int
    bytes_after: int


def promoted_ids(root: Path) -> set[tuple[str, str]]:
    return {(e["op"], e["candidate"]) for e in read_manifest(root)}


def stale_records(root: Path, op: str, cid: str) -> list[Path]:
    """The records of a candidate in which no gate's verdict stands for the files on disk any more
    (evidence.stale_reasons), less any that is the only record (stale or not) of one of its gates."""
    from harness import evidence as ev

    now = ev.current_pins(root, op, cid)
    stale, gates_current = [], set()
    gates_of: dict[Path, set[str]] = {}
    for path, rec in ev.records(root, op, cid):
        if isinstance(rec, ev.EvidenceError):
            continue                      # corrupt: ci verify reports it; never archived silently
        gates_of[path] = {g.gate for g in rec.gates}
        standing = {g for g, why in ev.stale_reasons(rec, now).items() if not why}
        if standing:
            gates_current |= standing
        else:
            stale.append(path)
    return sorted(p for p in stale if gates_of[p] <= gates_current)


def archive(root: Path, op: str, cid: str, dry_run: bool = False, stale_only: bool = False) -> list[Archived]:
    """Compress and remove every record of kernels_generated/<op>/<cid>/evidence/ (stale_only: the
    stale records, see stale_records); ValueError for an unknown candidate, or a promoted one
    without stale_only."""
    folder = root / "kernels_generated" / op / cid
    if not (folder / "kernel.py").is_file():
        raise ValueError(f"{op}/{cid}: no such candidate")
    if not stale_only and (op, cid) in promoted_ids(root):
        raise ValueError(f"{op}/{cid} is promoted: its evidence stays (demote it first, or --stale)")
    records = stale_records(root, op, cid) if stale_only else sorted((folder / "evidence").glob("*.json"))
    out = []
    for rec in records:
        data = rec.read_bytes()
        packed = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
        dest = root / ARCHIVE_REL / op / cid / (rec.name + ".xz")
        if not dry_run:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(packed)
            if lzma.decompress(dest.read_bytes()) != data:
                raise RuntimeError(f"{dest}: does not decompress to {rec}")
            rec.chmod(0o644)
            rec.unlink()
        out.append(Archived(rec, dest, len(data), len(packed)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("ids", nargs="+")
    ap.add_argument("--dry-run", action="store_true", help="report, change nothing")
    ap.add_argument("--stale", action="store_true",
                    help="only records whose hashes no longer match (promoted candidates too)")
    args = ap.parse_args()
    total_before = total_after = 0
    for cid in args.ids:
        try:
            done = archive(ROOT, args.op, cid, args.dry_run, args.stale)
        except ValueError as exc:
            sys.exit(f"archive_evidence: {exc}")
        for a in done:
            total_before += a.bytes_before
            total_after += a.bytes_after
            print(f"{a.record.relative_to(ROOT)} -> {a.archive.relative_to(ROOT)} "
                  f"({a.bytes_before} -> {a.bytes_after} bytes)")
        if not done:
            print(f"{args.op}/{cid}: no {'stale ' if args.stale else ''}evidence records")
    print(f"{'would free' if args.dry_run else 'freed'} {(total_before - total_after) / 1024:.0f} KiB of the carried tree")


if __name__ == "__main__":
    main()
