"""Land the evidence records a device gate run brought back, and optionally promote.

    python scripts/land_evidence.py FILES_AT [--promote]

FILES_AT is the folder the device tool copied $OUT into; gate.sh leaves one folder per gated
candidate there, `<id>/`, holding the compacted record(s) `<UTC stamp>-<host>.json` (plus
gate_report.json and assess.json, which are not evidence). For each: the records not yet in
kernels_generated/<op>/<id>/evidence/ are copied there (mode 644) and committed, one commit per
candidate. With --promote, `harness promote OP ID` then runs for every candidate folder there that
is not the promoted kernel of its op already, records landed now or in an earlier run (run it again
after mending what a refusal named); if it promotes, its branch promote/OP/ID is fast-forwarded into
the current branch and deleted. Needs a clean tree.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from harness.promotion import read_manifest  # noqa: E402  (the manifest as promote reads it)
RECORD = re.compile(r"^\d{8}T\d{6}\.\d+Z-.+\.json$")     # the evidence record file name


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def candidate_dir(root: Path, cid: str) -> Path:
    hits = sorted(p for p in (root / "kernels_generated").glob(f"*/{cid}") if (p / "kernel.py").is_file())
    if len(hits) != 1:
        raise SystemExit(f"land_evidence: candidate {cid}: {'not found' if not hits else 'in several ops'}")
    return hits[0]


def land(files_at: Path, root: Path) -> list[tuple[str, str, list[str]]]:
    """Copy and commit the new records of every candidate folder; returns (op, id, records)."""
    if git("status", "--porcelain", cwd=root):
        raise SystemExit("land_evidence: the tree has uncommitted changes; commit or stash them first")
    landed = []
    for sub, records in record_folders(files_at):
        cdir = candidate_dir(root, sub.name)
        ev = cdir / "evidence"
        ev.mkdir(exist_ok=True)
        new = [r for r in records if not (ev / r.name).exists()]
        for r in new:
            shutil.copyfile(r, ev / r.name)
            (ev / r.name).chmod(0o644)
        if not new:
            continue
        op = cdir.parent.name
        git("add", "--", *[str((ev / r.name).relative_to(root)) for r in new], cwd=root)
        git("commit", "-qm", f"{op} {sub.name}: gate evidence ({', '.join(r.name for r in new)})", cwd=root)
        landed.append((op, sub.name, [r.name for r in new]))
    return landed


def record_folders(files_at: Path) -> list[tuple[Path, list[Path]]]:
    """Each candidate folder in files_at that holds records, with its records (sorted)."""
    found = []
    for sub in sorted(p for p in files_at.iterdir() if p.is_dir()):
        records = sorted(p for p in sub.iterdir() if RECORD.match(p.name))
        if records:
            found.append((sub, records))
    return found


def gated(files_at: Path, root: Path) -> list[tuple[str, str]]:
    """(op, id) of every candidate folder in files_at that holds a record."""
    return [(candidate_dir(root, sub.name).parent.name, sub.name) for sub, _ in record_folders(files_at)]


def to_promote(files_at: Path, root: Path) -> list[tuple[str, str]]:
    """gated(), less each candidate that promoted.json already names for its op."""
    promoted = {(e["op"], e["candidate"]) for e in read_manifest(root)}
    return [oc for oc in gated(files_at, root) if oc not in promoted]


def promote(op: str, cid: str, root: Path) -> bool:
    res = subprocess.run([sys.executable, "-m", "harness.cli", "promote", op, cid], cwd=root,
                         capture_output=True, text=True)
    print(res.stdout + res.stderr, end="")
    if res.returncode != 0:
        return False
    branch = f"promote/{op}/{cid}"
    git("checkout", "--", "kernels_generated/promoted.json", cwd=root)   # the branch holds the change
    git("merge", "--ff-only", branch, cwd=root)
    git("branch", "-D", branch, cwd=root)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description="land device evidence records (and promote)")
    ap.add_argument("files_at", type=Path)
    ap.add_argument("--promote", action="store_true")
    a = ap.parse_args()
    if not a.files_at.is_dir():
        raise SystemExit(f"land_evidence: {a.files_at}: not a folder")
    landed = land(a.files_at, ROOT)
    for op, cid, recs in landed:
        print(f"landed {op}/{cid}: {', '.join(recs)}")
    if not landed:
        print("nothing new to land")
    if a.promote:
        for op, cid in to_promote(a.files_at, ROOT):
            if not promote(op, cid, ROOT):
                print(f"not promoted: {op}/{cid}")


if __name__ == "__main__":
    main()
