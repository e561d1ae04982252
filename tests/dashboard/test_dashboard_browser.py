"""The built site in headless Chromium (Debian's chromium; .ci/run installs it): the DOM
the browser renders shows the expected values, and a screenshot is saved and non-blank."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dashboard_fixture_repo import OP, geomean, measurements
from harness.dashboard.render import candidate_page

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent (apt-get install chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def _dom(tmp_path: Path, page: Path) -> str:
    res = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _cells(dom: str, row_attr: str) -> list[str]:
    row = re.search(rf"<tr {row_attr}>(.*?)</tr>", dom, re.S).group(1)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def test_overview_in_browser(site, tmp_path):
    m = measurements()
    dom = _dom(tmp_path, site.out / "index.html")
    cells = _cells(dom, f'data-op="{OP}"')
    speed = [r / c for tp in ("8", "16") for r, c in zip(m["reference_us"][tp], m["v1_us"][tp])]
    assert cells[0].startswith(OP)
    assert cells[1] == site.ids["v1"]                           # incumbent
    assert cells[2].startswith(site.ids["v1"])                  # best candidate
    assert cells[3] == f"{geomean(speed):.2f}x"
    assert cells[4] == f"{min(speed):.2f}x-{max(speed):.2f}x"
    assert cells[7].startswith("promoted")
    assert _cells(dom, 'data-op="kda_decode"')[7] == "none"


def test_candidate_page_in_browser_and_screenshots(site, tmp_path):
    m = measurements()
    page = site.out / candidate_page(OP, site.ids["v2"])
    dom = _dom(tmp_path, page)
    want = [m["v1_us"]["8"][i] / m["v2_us"]["8"][i] for i in range(7)]
    got = [float(c[4].rstrip("x")) for c in (_cells(dom, f'data-point="B={b} TP8 L=0 uniform state=fp32 shape=-"')
                                            for b in (1, 2, 4, 8, 16, 32, 64))]
    assert got == [round(w, 2) for w in want]
    assert 'id="gate-perf_sweep"' in dom and "regression" in dom
    out = Path(tmp_path) / "shots"
    out.mkdir()
    for name, url in (("overview", site.out / "index.html"), ("candidate", page)):
        png = out / f"{name}.png"
        res = _chromium(tmp_path, "--window-size=1400,1800", f"--screenshot={png}", "--hide-scrollbars", url.as_uri())
        assert res.returncode == 0 and png.is_file(), res.stderr[-2000:]
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000      # a blank page compresses to a few KB
    if os.environ.get("DASHBOARD_SCREENSHOT_DIR"):             # keep them for a reviewer
        shutil.copytree(out, os.environ["DASHBOARD_SCREENSHOT_DIR"], dirs_exist_ok=True)
