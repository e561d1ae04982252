"""`harness dashboard build`, `harness dashboard serve` (the reviewer dashboard) and `harness scorecard`
(the kernels' benchmark targets, as text)."""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer

from .errors import UserError
from .output import console, print_json

DEFAULT_OUT = "build/dashboard"          # under the project root (ignored by git)


def _out(out: Optional[Path]) -> Path:
    from . import paths

    d = (out if out is not None else paths.root() / DEFAULT_OUT).resolve()
    if d.exists() and not d.is_dir():
        raise UserError(f"--out {d} exists and is not a folder")
    return d


def _build(out_dir: Path, live: bool = False):
    from . import paths
    from .dashboard import build

    try:
        return build(paths.root(), out_dir, live=live)
    except OSError as exc:
        raise UserError(f"cannot write the dashboard to {out_dir}: {exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("scorecard")
    def scorecard_cmd(op: Optional[list[str]] = typer.Option(None, "--op", help="Only this op (repeatable)."),
                      results: Optional[Path] = typer.Option(None, "--results",
                                                             help="Folder of benchmark JSONs (default results/)."),
                      as_json: bool = typer.Option(False, "--json", help="Print the scorecard as JSON."),
                      gpu_name: Optional[str] = typer.Option(None, "--gpu",
                                                             help="The card whose runs to judge: h200 (the issue's, "
                                                                  "the default) or h100.")) -> None:
        """Issue 7's targets judged on the committed benchmark runs of one card: one table per
        promoted op (reference, torch.compile, ours, HBM floor, targets met) and the per-layer
        on/off tables."""
        from . import paths
        from .scorecard import DEFAULT_GPU, ScorecardError, report

        try:
            print(report(paths.root(), op or None, results, as_json, gpu_name or DEFAULT_GPU))
        except ScorecardError as exc:
            raise UserError(str(exc)) from None

    dash = typer.Typer(help="The reviewer dashboard: ops, candidates, gate evidence, runs, promotions.",
                       no_args_is_help=True)
    app.add_typer(dash, name="dashboard")

    @dash.command("build")
    def build_cmd(out: Optional[Path] = typer.Option(None, "--out", help=f"Output folder (default {DEFAULT_OUT})."),
                  as_json: bool = typer.Option(False, "--json", help="Print the result as JSON.")) -> None:
        """Render the static site (works offline: open index.html in a browser)."""
        out_dir = _out(out)
        with console().status("building the dashboard", spinner="dots") if not as_json else nullcontext():
            res = _build(out_dir)
        if as_json:
            print_json({"out_dir": str(res.out_dir), "index": str(res.out_dir / "index.html"), "pages": len(res.pages),
                        "ops": res.ops, "candidates": res.candidates, "runs": res.runs,
                        "promotion_events": res.history, "warnings": res.warnings})
            return
        c = console()
        c.print(f"[green]dashboard[/green]: {len(res.pages)} pages ({res.ops} ops, {res.candidates} candidates, "
                f"{res.runs} runs, {res.history} promotion events) in {res.out_dir}")
        c.print(f"open {res.out_dir / 'index.html'}")
        for w in res.warnings:
            c.print(f"[yellow]warning[/yellow]: {w}")

    @dash.command("serve")
    def serve_cmd(port: int = typer.Option(8765, "--port", help="Port on 127.0.0.1."),
                  out: Optional[Path] = typer.Option(None, "--out", help=f"Output folder (default {DEFAULT_OUT})."),
                  poll_s: float = typer.Option(2.0, "--poll-s", help="Seconds between checks for new runs/evidence."),
                  as_json: bool = typer.Option(False, "--json", help="Print the address as JSON, then serve.")) -> None:
        """Serve the dashboard on 127.0.0.1 and rebuild it as runs progress (Ctrl-C stops)."""
        from . import paths
        from .dashboard.serve import Watcher, make_server

        if not 0 < port < 65536:
            raise UserError(f"--port {port} is not a TCP port")
        if poll_s <= 0:
            raise UserError("--poll-s must be positive")
        out_dir = _out(out)
        res = _build(out_dir, live=True)
        try:
            server = make_server(out_dir, port)
        except OSError as exc:
            raise UserError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        c = console()
        watcher = Watcher(paths.root(), lambda: _build(out_dir, live=True), poll_s,
                          on_error=lambda exc: c.print(f"[yellow]rebuild failed[/yellow]: {exc}"))
        watcher.start()
        if as_json:
            print_json({"url": url, "out_dir": str(out_dir), "pages": len(res.pages), "poll_s": poll_s})
        else:
            c.print(f"serving {url} ({len(res.pages)} pages; rebuilds every change, checked each {poll_s:g} s; Ctrl-C stops)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            watcher.stop_event.set()
            server.server_close()

