"""Will a device call's tree fit? What the lent GPU machine receives, against its 64 MiB cap.

    python scripts/gpu/carry_size.py [CARRY ...]        # e.g. .device   or   .device .whl

A call sends the tracked files, the untracked files git does not ignore, and each carried path;
the whole is capped at 64 MiB, counted in bytes (a call over it is refused before any machine
starts). The tool counts more than this script: calls were refused at 63.998 MiB (session 14)
and 63.34 MiB (session 15) by this count and went through at 63.04 and 63.09 MiB, so anything
within MARGIN_BYTES of the cap is reported as over.
Prints each part, the total and what is left; exits 1 when over. Runs here, before the call.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAP_BYTES = 64 * 1024 * 1024
MARGIN_BYTES = 896 * 1024            # the tool's own count runs above ours: refused at 63.34 MiB, passed at 63.09


def tree_files(root: Path) -> list[Path]:
    """Tracked files plus untracked files git does not ignore (those that exist on disk)."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, capture_output=True, check=True).stdout.decode()
    return [root / p for p in dict.fromkeys(filter(None, out.split("\0"))) if (root / p).is_file()]


def path_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def parts(root: Path, carry: list[str]) -> list[tuple[str, int]]:
    """(label, bytes) of the tree and of each carried path; SystemExit for a carry that is missing."""
    rows = [("tracked + untracked-not-ignored", sum(p.stat().st_size for p in tree_files(root)))]
    for c in carry:
        p = root / c
        if not p.exists():
            raise SystemExit(f"carry_size: {c} does not exist under {root}")
        rows.append((c, path_bytes(p)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("carry", nargs="*", help="the paths the call will name in carry")
    args = ap.parse_args(argv)
    rows = parts(ROOT, args.carry)
    total = sum(b for _, b in rows)
    for label, b in rows:
        print(f"{b / 2**20:8.2f} MiB  {label}")
    left = CAP_BYTES - MARGIN_BYTES - total
    print(f"{total / 2**20:8.2f} MiB  total of {CAP_BYTES / 2**20:.0f} MiB less a {MARGIN_BYTES / 2**20:.1f} MiB margin: "
          + (f"{left / 2**20:.2f} MiB left" if left >= 0 else f"OVER by {-left / 2**20:.2f} MiB"))
    return 0 if left >= 0 else 1


if __name__ == "__main__":
    sys.exit(main())
