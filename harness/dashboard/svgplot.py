"""Line plots as inline SVG, drawn in Python: axes with ticks and units, a legend, a
marker per point with its exact value as a tooltip. No JavaScript, no network asset.

Scales: linear, log2 (batch sizes 1..64 are powers of two) or log10 (KL divergences span
decades). Colours are the Okabe-Ito palette (distinguishable with colour blindness) and
every series also has its own marker shape.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("circle", "square", "triangle", "diamond")


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]


@dataclass
class RefLine:
    """A horizontal reference line (e.g. speedup 1.0 = the incumbent)."""

    y: float
    label: str


@dataclass
class Plot:
    title: str
    x_label: str                   # with its unit, e.g. "batch (sequences)"
    y_label: str                   # with its unit, e.g. "speedup vs incumbent (x)"
    series: list[Series]
    x_scale: str = "linear"        # linear | log2 | log10
    y_scale: str = "linear"
    x_ticks: list[float] | None = None     # explicit tick positions (e.g. the measured batches)
    y_min: float | None = None
    y_max: float | None = None
    ref_lines: list[RefLine] = field(default_factory=list)
    lines: bool = True             # join the points of a series
    width: int = 600
    height: int = 340


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-6:
        ticks.append(round(t, 12))
        t += step
    if ticks[-1] < hi - step * 1e-6:
        ticks.append(round(t, 12))
    return ticks


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.3g}"


class _Axis:
    def __init__(self, scale: str, lo: float, hi: float, p0: float, p1: float):
        self.scale, self.p0, self.p1 = scale, p0, p1
        self.lo, self.hi = self._t(lo), self._t(hi)
        if self.hi == self.lo:
            self.lo, self.hi = self.lo - 0.5, self.hi + 0.5

    def _t(self, v: float) -> float:
        if self.scale == "log2":
            return math.log2(v)
        if self.scale == "log10":
            return math.log10(v)
        return v

    def __call__(self, v: float) -> float:
        return self.p0 + (self._t(v) - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def _usable(v: float, scale: str) -> bool:
    return math.isfinite(v) and (scale == "linear" or v > 0)


def _ticks(scale: str, lo: float, hi: float, explicit: list[float] | None) -> tuple[list[float], float, float]:
    if explicit:
        ex = sorted(v for v in explicit if _usable(v, scale))
        return ex, min(lo, ex[0]), max(hi, ex[-1])
    if scale == "linear":
        t = nice_ticks(lo, hi)
        return t, t[0], t[-1]
    base = 2 if scale == "log2" else 10
    e0, e1 = math.floor(math.log(lo, base) + 1e-9), math.ceil(math.log(hi, base) - 1e-9)
    if e1 == e0:
        e1 += 1
    step = max(1, math.ceil((e1 - e0) / 8))
    t = [float(base ** e) for e in range(e0, e1 + 1, step)]
    if base == 10 and e1 - e0 <= 2:          # few decades: label 2x and 5x too
        t = sorted(t + [m * 10.0 ** e for e in range(e0, e1) for m in (2, 5)])
    return t, t[0], t[-1]


def _marker(shape: str, x: float, y: float, color: str, tip: str) -> str:
    t = f"<title>{escape(tip)}</title>"
    if shape == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill="{color}">{t}</rect>'
    if shape == "triangle":
        return (f'<polygon points="{x:.1f},{y - 4.5:.1f} {x - 4.2:.1f},{y + 3.2:.1f} {x + 4.2:.1f},{y + 3.2:.1f}" '
                f'fill="{color}">{t}</polygon>')
    if shape == "diamond":
        return (f'<polygon points="{x:.1f},{y - 4.5:.1f} {x + 4.5:.1f},{y:.1f} {x:.1f},{y + 4.5:.1f} {x - 4.5:.1f},{y:.1f}" '
                f'fill="{color}">{t}</polygon>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}">{t}</circle>'


def render(p: Plot) -> str:
    """The plot as an <svg> element (a string of markup, safe to inline)."""
    pts = [(x, y) for s in p.series for x, y in s.points if _usable(x, p.x_scale) and _usable(y, p.y_scale)]
    label = escape(p.title)
    if not pts:
        return (f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{p.width}" height="60" role="img" '
                f'aria-label="{label}"><text x="10" y="35" class="empty">{label}: no data</text></svg>')
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    ylo = min(ys + [r.y for r in p.ref_lines if _usable(r.y, p.y_scale)])
    yhi = max(ys + [r.y for r in p.ref_lines if _usable(r.y, p.y_scale)])
    if p.y_min is not None:
        ylo = min(ylo, p.y_min)
    if p.y_max is not None:
        yhi = max(yhi, p.y_max)
    xt, xlo, xhi = _ticks(p.x_scale, min(xs), max(xs), p.x_ticks)
    yt, ylo, yhi = _ticks(p.y_scale, ylo, yhi, None)
    n_leg = len(p.series) + len(p.ref_lines)
    left, right, top = 70, 20, 34
    longest = max([len(s.label) for s in p.series] + [len(r.label) for r in p.ref_lines])
    n_cols = max(1, min(4, int((p.width - left - right) // (longest * 6.6 + 42))))
    leg_rows = math.ceil(n_leg / n_cols)
    bottom = 52 + 20 * leg_rows
    W, H = p.width, p.height + 20 * leg_rows
    pad = 8                                  # keep markers off the axis lines
    X = _Axis(p.x_scale, xlo, xhi, left + pad, W - right - pad)
    Y = _Axis(p.y_scale, ylo, yhi, H - bottom - pad, top + pad)
    o = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
         f'role="img" aria-label="{label}">',
         f'<title>{label}</title>',
         f'<text x="{W / 2:.0f}" y="20" text-anchor="middle" class="ptitle">{label}</text>',
         f'<rect x="{left}" y="{top}" width="{W - left - right}" height="{H - top - bottom}" class="frame"/>']
    for t in yt:
        y = Y(t)
        o.append(f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        o.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{fmt_tick(t)}</text>')
    for t in xt:
        x = X(t)
        o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{H - bottom}" class="grid"/>')
        o.append(f'<text x="{x:.1f}" y="{H - bottom + 16}" text-anchor="middle" class="tick">{fmt_tick(t)}</text>')
    o.append(f'<text x="{(left + W - right) / 2:.0f}" y="{H - bottom + 36}" text-anchor="middle" class="axis">'
             f'{escape(p.x_label)}</text>')
    cy = (top + H - bottom) / 2
    o.append(f'<text x="16" y="{cy:.0f}" text-anchor="middle" transform="rotate(-90 16 {cy:.0f})" class="axis">'
             f'{escape(p.y_label)}</text>')
    legend = []
    for i, r in enumerate(p.ref_lines):
        if not _usable(r.y, p.y_scale):
            continue
        y = Y(r.y)
        o.append(f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" class="ref ref{i}"/>')
        legend.append(f'<line x1="0" x2="22" y1="0" y2="0" class="ref ref{i}"/>'
                      f'<text x="28" y="4" class="legend">{escape(r.label)}</text>')
    for i, s in enumerate(p.series):
        color, shape = PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]
        sp = sorted((x, y) for x, y in s.points if _usable(x, p.x_scale) and _usable(y, p.y_scale))
        o.append(f'<g class="series" data-series="{escape(s.label)}">')
        if p.lines and len(sp) > 1:
            path = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in sp)
            o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        o += [_marker(shape, X(x), Y(y), color, f"{s.label}: x={fmt_tick(x)}, y={y:.4g}") for x, y in sp]
        o.append("</g>")
        legend.append(f'<line x1="0" x2="22" y1="0" y2="0" stroke="{color}" stroke-width="2"/>'
                      + _marker(shape, 11, 0, color, s.label) + f'<text x="28" y="4" class="legend">{escape(s.label)}</text>')
    col_w = (W - left - right) / n_cols
    for i, item in enumerate(legend):
        lx, ly = left + (i % n_cols) * col_w, H - 20 * leg_rows + 20 * (i // n_cols) - 4
        o.append(f'<g transform="translate({lx:.0f},{ly:.0f})">{item}</g>')
    o.append("</svg>")
    return "\n".join(o)
