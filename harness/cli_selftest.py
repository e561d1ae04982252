"""`harness selftest`: inject faults (crashes, hangs, kills, cheats, leaked keys, bad input,
a hostile LLM server) and print the counts (harness/selftest/)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .errors import UserError
from .output import print_json


def register(app: typer.Typer) -> None:
    @app.command("selftest")
    def selftest(
        report: bool = typer.Option(False, "--report", help="Full counts (>= 50 crashes, 20 hangs, 50 kills): minutes."),
        quick: bool = typer.Option(False, "--quick", help="Small counts, as the CI tests use."),
        only: Optional[str] = typer.Option(None, "--only", help="Comma-separated sections: faults,durability,cheats,secrets,cli,llm."),
        json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        gpu_results: Optional[str] = typer.Option(None, "--gpu-results",
                                                  help="JSON of scripts/gpu/selftest_gpu.py: fills in the GPU rows."),
    ) -> None:
        """Inject faults into the harness and count the outcomes; exit 1 if any figure fails."""
        from .selftest import SECTIONS, run_selftest

        if report and quick:
            raise UserError("--report and --quick exclude each other")
        sections = [s.strip() for s in only.split(",")] if only else None
        bad = [s for s in sections or [] if s not in SECTIONS]
        if bad:
            raise UserError(f"unknown section(s) {bad} (choose from {', '.join(SECTIONS)})")
        from .selftest.gpu import load_gpu_results

        gres = load_gpu_results(Path(gpu_results)) if gpu_results else None
        if json_out or not sys.stderr.isatty():
            rep = run_selftest(quick=not report, only=sections, gpu_results=gres)
        else:
            from rich.console import Console

            con = Console(stderr=True)
            with con.status("selftest") as status:
                rep = run_selftest(quick=not report, only=sections, gpu_results=gres,
                                   note=lambda m: status.update(f"selftest: {m}"))
        if json_out:
            print_json(rep.to_json())
        else:
            print_table(rep, gres.get("gpu") if gres else None)
        if not rep.ok:
            raise typer.Exit(1)


def print_table(rep, ingested_gpu: str | None = None) -> None:
    """ingested_gpu: the GPU named in a --gpu-results file (its rows came from that machine)."""
    from rich.table import Table

    colour = {"PASS": "green", "FAIL": "red", "NOT_RUN": "yellow", "INFO": "cyan"}
    gpu = f"GPU rows from {ingested_gpu} (--gpu-results)" if ingested_gpu else f"GPU {'yes' if rep.gpu else 'no'}"
    t = Table(title=f"harness selftest ({'quick' if rep.quick else 'full'}; {gpu}; {rep.wall_s:.0f} s)", show_lines=False)
    for col in ("section", "figure", "value", "target", "status", "note"):
        t.add_column(col, overflow="fold")
    for s in rep.sections:
        if s.error:
            t.add_row(s.title, "section error", "-", "-", "[red]FAIL[/]", s.error)
        for i, f in enumerate(s.figures):
            val = f"{f.value}{(' ' + f.unit) if f.unit and f.value is not None else ''}"
            tgt = "" if f.target is None else f"{f.op} {f.target}"
            t.add_row(s.title if i == 0 else "", f.name, val, tgt, f"[{colour[f.status.value]}]{f.status.value}[/]", f.note)
        t.add_section()
    from .output import console

    console().print(t)
