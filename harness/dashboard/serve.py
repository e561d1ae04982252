"""`harness dashboard serve`: the static site on 127.0.0.1, rebuilt when runs or evidence
change. A watcher thread fingerprints the inputs (paths, sizes, mtimes of runs/,
kernels_generated/ and the git refs) every poll_s seconds and rebuilds on a change; pages
built in live mode poll version.txt and reload themselves."""
from __future__ import annotations

import functools
import http.server
import os
import threading
from pathlib import Path
from typing import Callable

WATCHED = ("runs", "kernels_generated", ".git/refs", ".git/packed-refs", ".git/HEAD")


def fingerprint(root: Path) -> tuple:
    """Cheap change detector: (path, size, mtime_ns) of every watched file."""
    items = []
    for rel in WATCHED:
        base = root / rel
        if base.is_file():
            st = base.stat()
            items.append((rel, st.st_size, st.st_mtime_ns))
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                p = os.path.join(dirpath, f)
                try:
                    st = os.stat(p)
                except FileNotFoundError:       # removed while walking (a temp file renamed)
                    continue
                items.append((p, st.st_size, st.st_mtime_ns))
    return tuple(sorted(items))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


class Watcher(threading.Thread):
    def __init__(self, root: Path, rebuild: Callable[[], None], poll_s: float = 2.0,
                 on_error: Callable[[Exception], None] | None = None):
        super().__init__(daemon=True, name="dashboard-watcher")
        self.root, self.rebuild, self.poll_s = root, rebuild, poll_s
        self.on_error = on_error or (lambda exc: None)
        self.stop_event = threading.Event()
        self.last = fingerprint(root)
        self.rebuilds = 0

    def check(self) -> bool:
        """Rebuild if anything changed since the last look; True if it rebuilt."""
        now = fingerprint(self.root)
        if now == self.last:
            return False
        self.last = now
        try:
            self.rebuild()
            self.rebuilds += 1
        except Exception as exc:  # noqa: BLE001 - a half-written input must not kill the server
            self.on_error(exc)
        return True

    def run(self) -> None:
        while not self.stop_event.wait(self.poll_s):
            self.check()


def make_server(out_dir: Path, port: int) -> http.server.ThreadingHTTPServer:
    handler = functools.partial(_Quiet, directory=str(out_dir))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
