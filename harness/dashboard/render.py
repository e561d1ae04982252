"""Rendering the collected views into a static site: one HTML file per page, flat in the
output folder, plus style.css. Every value printed passes through the secrets scrubber."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ..agent.secrets import scrub
from ..atomic_file import replacing
from . import svgplot
from .model import Badge, CandidateView, OpView, RunView, SiteData
from .source import highlight_python, pygments_css, unified_diff

HERE = Path(__file__).parent
LIVE_FILE = "version.txt"        # serve mode: pages poll it and reload when it changes


@dataclass
class BuildResult:
    out_dir: Path
    pages: list[str] = field(default_factory=list)
    ops: int = 0
    candidates: int = 0
    runs: int = 0
    history: int = 0
    warnings: list[str] = field(default_factory=list)


def candidate_page(op: str, cid: str) -> str:
    return f"candidate-{op}-{cid}.html"


def run_page(run_id: str) -> str:
    return f"run-{run_id}.html"


def _finalize(value: Any) -> Any:
    """Jinja's last step for every {{ }}: scrub key-shaped text, markup included."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return Markup(scrub(str(value)))
    if isinstance(value, str):
        return scrub(value)
    return value


def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, finalize=_finalize, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters.update(num=_num, pct=_pct, ts=_ts, rng=_rng, tojson_pretty=_json)
    env.globals.update(candidate_page=candidate_page, run_page=run_page, Badge=Badge, sc=_scorecard())
    return env


def _scorecard():
    """harness.scorecard for the Benchmarks page's words (marks, summaries, legends)."""
    from .. import scorecard

    return scorecard


def _num(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return str(v)
    return f"{v:.{digits}g}" if abs(v) < 1e5 else f"{v:.3e}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _ts(v: float | None) -> str:
    if v is None:
        return "-"
    return datetime.fromtimestamp(v, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _rng(r: tuple[float, float] | None, fmt: str = "x") -> str:
    if r is None:
        return "-"
    if fmt == "%":
        return f"{100 * r[0]:.0f}-{100 * r[1]:.0f}%"
    return f"{r[0]:.2f}x-{r[1]:.2f}x"


def _json(v: Any) -> str:
    return json.dumps(v, indent=2, sort_keys=True, default=str)


# ---- plots --------------------------------------------------------------------------------
def _series(points, attr: str) -> list[svgplot.Series]:
    groups: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        v = getattr(p, attr)
        if v is not None:
            groups.setdefault(p.series, []).append((float(p.batch), float(v)))
    return [svgplot.Series(k, v) for k, v in sorted(groups.items())]


def sweep_plots(c: CandidateView, margin: float | None) -> list[Markup]:
    if not c.sweep:
        return []
    batches = sorted({float(p.batch) for p in c.sweep})
    refs = [svgplot.RefLine(1.0, "incumbent (1.0x)")]
    if margin:
        refs.append(svgplot.RefLine(margin, f"required geomean ({margin:.2f}x)"))
    speed = svgplot.Plot(f"Speedup vs incumbent, {c.op}", "batch (sequences per decode step, log2 scale)",
                         "speedup vs incumbent (x)", _series(c.sweep, "speedup"), x_scale="log2", x_ticks=batches,
                         y_min=0.0, ref_lines=refs)
    roof = svgplot.Plot(f"Fraction of the HBM roofline, {c.op}", "batch (sequences per decode step, log2 scale)",
                        "roofline floor / kernel time (fraction)", _series(c.sweep, "roofline_fraction"),
                        x_scale="log2", x_ticks=batches, y_min=0.0, y_max=1.0,
                        ref_lines=[svgplot.RefLine(1.0, "roofline (1.0)")])
    return [Markup(svgplot.render(speed)), Markup(svgplot.render(roof))]


def drift_plots(c: CandidateView) -> list[Markup]:
    out = []
    units = {"kl": ("per-step KL(off || on) (nats, log10 scale)", "log10"),
             "logit_rel_err": ("||logits_on - logits_off|| / ||logits_off|| (log10 scale)", "log10")}
    for metric in sorted({d.metric for d in c.drift}):
        series = [svgplot.Series(d.run_kind, [(float(i + 1), v) for i, v in enumerate(d.values)])
                  for d in c.drift if d.metric == metric]
        label, scale = units.get(metric, (metric, "linear"))
        if scale == "log10" and not any(v > 0 for s in series for _, v in s.points):
            scale = "linear"
        out.append(Markup(svgplot.render(svgplot.Plot(f"Numerics drift over generated tokens: {metric}",
                                                      "generated token (decode step)", label, series,
                                                      y_scale=scale))))
    return out


def run_plots(r: RunView) -> list[Markup]:
    out = []
    kinds = {c.score_kind for c in r.candidates if c.score is not None}
    for kind in sorted(k for k in kinds if k):
        pts = [(float(c.round), float(c.score)) for c in r.candidates if c.score is not None and c.score_kind == kind]
        best, run_best = [], None
        for rnd in sorted({x for x, _ in pts}):
            m = min(y for x, y in pts if x == rnd)
            run_best = m if run_best is None else min(run_best, m)
            best.append((rnd, run_best))
        ylab = "geomean kernel time (us), lower is better" if kind == "time_us" else \
            "compile proxy score (registers, spills, 128-bit loads), lower is better"
        ticks = sorted({x for x, _ in pts})
        out.append(Markup(svgplot.render(svgplot.Plot(
            f"Candidates by round ({kind})", "round", ylab,
            [svgplot.Series("candidates", pts), svgplot.Series("best so far", best)], x_ticks=ticks))))
    if r.llm_calls and r.started_ts is not None:
        tok, usd, t_pts, c_pts = 0, 0.0, [], []
        for call in r.llm_calls:
            tok += call.input_tokens + call.output_tokens
            usd += float(call.cost_usd or 0.0)
            t_pts.append((call.ts - r.started_ts, float(tok)))
            c_pts.append((call.ts - r.started_ts, usd))
        out.append(Markup(svgplot.render(svgplot.Plot("LLM tokens used", "time since run start (s)",
                                                      "cumulative tokens (input + output)",
                                                      [svgplot.Series("tokens", t_pts)], y_min=0.0))))
        out.append(Markup(svgplot.render(svgplot.Plot("LLM cost", "time since run start (s)", "cumulative cost (USD)",
                                                      [svgplot.Series("cost", c_pts)], y_min=0.0))))
    return out


# ---- writing ------------------------------------------------------------------------------
def _write(path: Path, text: str) -> None:
    """Temp file + rename: a page being served is never seen half-written."""
    with replacing(path, mode=0o644) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _margin(root: Path) -> float | None:
    try:
        from gates.config import config_path, load_config

        return float(load_config(config_path(root)).get("perf_sweep", "geomean_margin"))
    except Exception:  # noqa: BLE001 - a root without gates/: the line is simply not drawn
        return None


def benchmarks_page(gpu_name: str) -> str:
    """The Benchmarks page of a card other than the H200's (benchmarks.html)."""
    return f"benchmarks-{gpu_name}.html"


def render_site(data: SiteData, out_dir: Path, live: bool = False) -> BuildResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    env = _env()
    res = BuildResult(out_dir=out_dir, ops=len(data.ops), runs=len(data.runs), history=len(data.history),
                      warnings=list(data.warnings))
    margin = _margin(Path(data.root))
    common = {"site": data, "live": live, "live_file": LIVE_FILE}

    def page(name: str, template: str, **ctx: Any) -> None:
        _write(out_dir / name, env.get_template(template).render(**common, **ctx))
        res.pages.append(name)

    page("index.html", "overview.html.j2", title="Overview")
    page("history.html", "history.html.j2", title="Promotion history")
    page("runs.html", "runs.html.j2", title="Agent runs")
    main_gpu = _scorecard().DEFAULT_GPU                             # benchmarks.html: the card
    gpus = [(main_gpu, "benchmarks.html", data.benchmarks)] + [(g.gpu, benchmarks_page(g.gpu), g.benchmarks)
                                                             for g in data.other_gpus]
    href = {g: h for g, h, _ in gpus}

    def bench_page(name: str, title: str, gpu_name: str, cards: list[Any], layers: list[Any]) -> None:
        elsewhere = _scorecard().measured_elsewhere(cards, {g: c for g, _, c in gpus if g != gpu_name})
        page(name, "benchmarks.html.j2", title=title, gpu=gpu_name, gpus=gpus, href=href, cards=cards,
             layers=layers, elsewhere=elsewhere)

    bench_page("benchmarks.html", "Benchmarks", main_gpu, data.benchmarks, data.layer_tables)
    for g in data.other_gpus:
        bench_page(benchmarks_page(g.gpu), f"Benchmarks ({g.gpu.upper()})", g.gpu, g.benchmarks, g.layer_tables)
    for r in data.runs:
        page(run_page(r.id), "run.html.j2", title=f"Run {r.id}", run=r, plots=run_plots(r),
             known={(o.name, c.id) for o in data.ops for c in o.candidates})
    for op in data.ops:
        for c in op.candidates:
            res.candidates += 1
            page(candidate_page(op.name, c.id), "candidate.html.j2", title=f"{op.name} / {c.id}", op=op, c=c,
                 code=highlight_python(c.source), diffs=_diffs(op, c), sweep_plots=sweep_plots(c, margin),
                 drift_plots=drift_plots(c))
    css = (HERE / "static" / "style.css").read_text() + "\n/* token colours (pygments) */\n" + pygments_css()
    _write(out_dir / "style.css", css)
    _write(out_dir / LIVE_FILE, data.generated_utc + "\n")
    return res


def _diffs(op: OpView, c: CandidateView) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for what, other_id in (("parent", c.parent), ("incumbent", op.incumbent)):
        if not other_id or other_id == c.id:
            out.append({"what": what, "other": other_id, "html": None, "stat": None,
                        "note": "this candidate is the incumbent" if other_id == c.id else
                        ("no parent (drafted from scratch)" if what == "parent" else
                         "no promoted kernel: the incumbent is the reference")})
            continue
        other = op.candidate(other_id)
        if other is None or not other.source:
            out.append({"what": what, "other": other_id, "html": None, "stat": None,
                        "note": f"{other_id} is not under kernels_generated/{op.name}/"})
            continue
        html, stat = unified_diff(other.source, c.source, f"{other_id}/kernel.py", f"{c.id}/kernel.py")
        out.append({"what": what, "other": other_id, "html": html, "stat": stat, "note": ""})
    return out
