"""Replacing a file whole: written as a temp file in the same folder, then renamed over the target,
so a reader sees the old file or the new one, never half of either.

mkstemp creates its temp file 0600, and the rename would hand that mode on: before session 42 a
run's summary.json and the committed ledgers (prompts/kernels/*/measured.json) came out readable
by their owner alone. So the temp file first gets the mode the target should keep."""
from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask. Linux reports it in /proc/self/status; elsewhere it can only be read by
    setting it, so that is done under a lock and undone at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode_for(path: Path) -> int:
    """The permission bits a rewrite of `path` should carry: the file's own when it exists, else
    what a plain open() would create (0666 less the umask)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


@contextmanager
def replacing(path: Path, mode: int | None = None) -> Iterator[Path]:
    """Yield an empty temp file beside `path` (mode `mode`, default file_mode_for(path)) for the
    body to write; on a clean exit it is renamed over `path`, on an exception removed. Creating it
    raises OSError before the body runs."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode_for(path) if mode is None else mode)
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
