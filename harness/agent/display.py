"""What a person sees: a live table while the run works, one screen at the end."""
from __future__ import annotations

import sys
import time
from typing import Any

from .state import RunState


class LiveView:
    """A rich Live panel: the last event and the candidates of the run so far."""

    def __init__(self, title: str):
        from rich.console import Console
        from rich.live import Live

        self.title = title
        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)
        self.last = ""

    def __enter__(self) -> "LiveView":
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def __call__(self, msg: str, st: RunState) -> None:
        self.last = msg
        self.live.update(self._render(st))

    def _render(self, st: RunState):
        from rich.table import Table

        t = Table(title=f"{self.title}  [dim]{self.last}[/dim]", expand=False)
        for col in ("round", "slot", "candidate", "static", "compile", "evaluate", "score"):
            t.add_column(col)
        for r in sorted(st.records.values(), key=lambda c: (c.round, c.slot))[-14:]:
            comp = " ".join(f"{a[3:]}:{'ok' if c.status.value == 'ok' else 'X'}" for a, c in r.compile.items())
            t.add_row(str(r.round), str(r.slot), r.id, {None: "..", True: "ok", False: "refused"}[r.static_ok],
                      comp or "..", r.evaluate.verdict if r.evaluate else "..",
                      "-" if r.score is None else f"{r.score:.2f}")
        return t


def print_summary(s: dict[str, Any]) -> None:
    from rich.table import Table

    from ..output import console

    c = console()
    c.rule(f"[bold]harness optimize {s['op']}[/bold]  run {s['run_id']}")
    c.print(f"agent {s['agent']}; rounds {s['rounds_finished']}/{s['rounds_planned']}; "
            f"{s['candidates']} candidates ({s['slots_failed']} slots without a kernel); "
            f"{s['compiled_all_archs']} compiled for every arch; {s['verified']} verified on a GPU")
    c.print(f"GPU stages: {s['gpu_stages']}; ranking by {s['ranking']}")
    if s["llm_calls"]:
        c.print(f"LLM: {s['llm_calls']} requests, {s['tokens']} tokens, ${s['cost_usd']:.4f}")
    if s["stopped"]:
        c.print(f"[yellow]stopped early: {s['stopped']}[/yellow]")
    if s.get("not_evaluated"):
        c.print(f"[yellow]not evaluated on the GPU: {', '.join(s['not_evaluated'])} "
                f"(harness optimize --op {s['op']} --resume {s['run_id']})[/yellow]")
    if s.get("not_measured") and not s["gpu_available"]:
        n = len(s["not_measured"])
        c.print(f"compiled, not measured (no GPU here): {n} draft{'s' if n != 1 else ''}; on a machine with a GPU, "
                f"`harness optimize --op {s['op']} --resume {s['run_id']}` measures them (it needs runs/{s['run_id']} "
                f"and the drafts' folders kernels_generated/{s['op']}/<id>/)", markup=False)
    t = Table(show_lines=False)
    for col in ("r", "s", "candidate", "author", "result", "score"):
        t.add_column(col)
    best_id = s["best"]["id"] if s["best"] else None
    for row in s["candidates_table"][-12:]:
        mark = "[bold green]" if row["id"] == best_id else ""
        t.add_row(str(row["round"]), str(row["slot"]), f"{mark}{row['id']}", row["author"], row["summary"],
                  "-" if row["score"] is None else f"{row['score']:.2f} ({row['score_kind']})")
    c.print(t)
    b = s["best"]
    if b:
        extra = f" {b['family']} {b['params']}" if b.get("family") else ""
        c.print(f"best: [bold]{b['id']}[/bold]{extra}: {b['summary']}")
    sp = s.get("speedup") or {}
    if sp.get("vs_reference_geomean"):
        c.print(f"speedup (geomean): {sp['vs_reference_geomean']:.2f}x vs reference"
                + (f", {sp['vs_torch_compile_geomean']:.2f}x vs torch.compile" if sp.get("vs_torch_compile_geomean") else "")
                + (f", {sp['vs_promoted_geomean']:.2f}x vs the promoted {sp['promoted']}"
                   if sp.get("vs_promoted_geomean") else "")
                + (f", {sp['vs_today_geomean']:.2f}x vs {sp['today']}"
                   if sp.get("vs_today_geomean") and not sp.get("vs_promoted_geomean") else ""), markup=False)
    if sp.get("narrow_hint"):
        h = sp["narrow_hint"]
        c.print(f"it wins by the perf gate's margin on part of its scope ({h['points']} search points, "
                f"{h['geomean']:.3f}x what runs there today): gate it there with `{h['command']}`", markup=False)
    g = s.get("gates") or {}
    if g.get("ran"):
        c.print("gates: " + ", ".join(f"{k} {v}" for k, v in g["verdicts"].items())
                + f" -> {'PASS' if g['passed'] else 'not passed'}")
    elif g:
        c.print(f"gates: not run ({g.get('reason')})")
    p = s.get("promoted")
    if p:
        c.print(f"promotion: {'promoted on ' + p.get('branch', '') if p.get('ok') else 'refused: ' + p.get('reason', '')}")
    c.print(f"[dim]run folder: runs/{s['run_id']}  (resume with --resume {s['run_id']})[/dim]")


class LineLog:
    """Progress for a log file, not a terminal (stderr not a tty, or --json): one timestamped
    line per event with a message, so a run on a lent machine leaves a readable trail."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.t0 = time.monotonic()

    def __call__(self, msg: str, st: RunState) -> None:
        if msg:
            print(f"[{time.monotonic() - self.t0:7.1f} s] {msg}", file=self.stream, flush=True)

