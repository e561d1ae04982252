"""Plot geometry, point parsing, highlighting and the live server, without the fixture repo."""
from __future__ import annotations

import math
import re
import urllib.request

from harness.dashboard import extract, svgplot
from harness.dashboard.serve import Watcher, make_server
from harness.dashboard.source import highlight_python, unified_diff


def _markers(svg: str) -> list[tuple[float, float, str]]:
    out = [(float(x), float(y), t) for x, y, t in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"[^>]*><title>([^<]*)', svg)]
    return [m for m in out if "x=" in m[2]]


def test_log2_axis_spacing_and_linear_values():
    pts = [(1, 1.0), (2, 1.5), (4, 2.0), (64, 3.0)]
    svg = svgplot.render(svgplot.Plot("t", "batch (sequences)", "speedup (x)", [svgplot.Series("TP8", pts)],
                                      x_scale="log2", x_ticks=[1, 2, 4, 8, 16, 32, 64], y_min=0.0))
    m = _markers(svg)
    assert len(m) == 4
    (x1, y1, _), (x2, y2, _), (x4, y4, _), (x64, y64, _) = m
    assert math.isclose(x2 - x1, x4 - x2, rel_tol=1e-2)                 # equal steps per doubling
    assert math.isclose(x64 - x4, 4 * (x2 - x1), rel_tol=1e-2)
    assert y2 < y1 and math.isclose((y1 - y2) / 0.5, (y2 - y64) / 1.5, rel_tol=1e-2)   # linear, up is larger
    for text in ("batch (sequences)", "speedup (x)", ">TP8<", ">64<", ">0<"):
        assert text in svg


def test_log10_ticks_cover_decades_and_empty_plot():
    svg = svgplot.render(svgplot.Plot("kl", "token", "KL (nats)", [svgplot.Series("run", [(1, 2e-8), (2, 3e-6)])],
                                      y_scale="log10"))
    for t in ("1e-8", "1e-7", "1e-6", "1e-5"):
        assert f">{t}<" in svg
    assert "no data" in svgplot.render(svgplot.Plot("x", "a", "b", [svgplot.Series("s", [(1, float("nan"))])]))
    assert svgplot.nice_ticks(0.93, 1.07) == [0.9, 0.95, 1.0, 1.05, 1.1]


def test_sweep_points_from_gate_labels():
    from gates.points import key
    from harness.opdef import Point, RoutingProfile

    labels = [key(Point(batch=b, tp=tp, routing=r)) for tp in (8, 16) for b in (1, 64) for r in list(RoutingProfile)[:2]]
    nums = {"points": [{"point": lab, "incumbent_us": 10.0, "candidate_us": 8.0, "floor_us": 4.0, "noise_rel": 0.01}
                       for lab in labels]}
    pts = extract.sweep_points(nums)
    assert len(pts) == len(labels)
    assert {p.batch for p in pts} == {1, 64} and {p.tp for p in pts} == {8, 16}
    assert all(math.isclose(p.speedup, 1.25) and math.isclose(p.roofline_fraction, 0.5) for p in pts)
    assert len({p.series for p in pts}) == 4            # TP x routing profile
    assert all(p.series.startswith(f"TP{p.tp} ") for p in pts)


def test_highlight_keeps_lines_balanced_and_escaped():
    src = 'def f(x):\n    """doc\n    <b>more</b>"""\n    return x < 1\n'
    html = str(highlight_python(src))
    lines = re.findall(r'<span class="ln" data-n="\d+">(.*?)</span>\n', html)
    assert len(lines) == 4
    assert "<b>" not in html and "&lt;b&gt;" in html
    for ln in html.split("\n")[:-1]:
        assert ln.count("<span") == ln.count("</span>")
    diff, stat = unified_diff("a\nb\n", "a\nc\n", "old", "new")
    assert (stat.added, stat.removed) == (1, 1) and 'class="add">+c' in diff


def test_watcher_rebuilds_and_server_serves(tmp_path):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("v0")
    calls = []

    def rebuild():
        calls.append(1)
        (out / "index.html").write_text(f"v{len(calls)}")

    w = Watcher(tmp_path, rebuild, poll_s=60)
    assert not w.check()
    (tmp_path / "runs" / "r1" / "events.jsonl").write_text("{}\n")
    assert w.check() and calls == [1]
    server = make_server(out, 0)
    import threading

    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as r:
            assert r.read() == b"v1" and r.headers["Cache-Control"] == "no-store"
    finally:
        server.shutdown()
        server.server_close()
