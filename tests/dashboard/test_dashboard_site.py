"""The site built from fixture records: pages, values, secrets, history, runs."""
from __future__ import annotations

import html as html_lib
import re
import subprocess
from pathlib import Path

from harness.dashboard import collect
from harness.dashboard.model import Badge, PromotionState
from harness.dashboard.render import candidate_page, run_page

from dashboard_fixture_repo import (BAD_LEDGER_OP, BENCH, BENCH_LAUNCH_US, H100_OURS_US, CPU_LEDGER, CPU_OP, FLIPS, FUSED_OFF, LAYERS,
                                    LEDGER, OP, RUN_ID, SECRET, geomean, measurements)


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _row(html: str, attr: str) -> str:
    m = re.search(rf'<tr {attr}>(.*?)</tr>', html, re.S)
    assert m, attr
    return m.group(1)


def test_every_page_written_and_linked(site):
    names = {p.name for p in site.out.iterdir()}
    assert {"index.html", "history.html", "runs.html", "benchmarks.html", "style.css", run_page(RUN_ID)} <= names
    for cid in (site.ids["v1"], site.ids["v2"]):
        assert candidate_page(OP, cid) in names
    for page in site.out.glob("*.html"):
        html = page.read_text()
        for href in re.findall(r'href="([^"#]+)"', html):
            assert not href.startswith(("http:", "https:", "//")), f"{page.name} links off-site: {href}"
            assert (site.out / href).is_file(), f"{page.name}: broken link {href}"
        assert "<script src" not in html and "@import" not in html


def test_no_secret_anywhere(site):
    assert SECRET in (site.root / "kernels_generated" / OP / site.ids["v2"] / "kernel.py").read_text()
    for f in site.out.iterdir():
        assert SECRET not in f.read_text(), f.name


def test_overview_row_values(site):
    m = measurements()
    row = _row((site.out / "index.html").read_text(), f'data-op="{OP}"')
    v1 = site.ids["v1"]
    speed = [r / c for tp in ("8", "16") for r, c in zip(m["reference_us"][tp], m["v1_us"][tp])]
    frac = [f / c for tp in ("8", "16") for f, c in zip(m["floor_us"][tp], m["v1_us"][tp])]
    text = _text(row)
    assert v1 in re.search(r'class="incumbent">(.*?)</td>', row, re.S).group(1)
    assert v1 in re.search(r'class="best">(.*?)</td>', row, re.S).group(1)   # v2 fails perf_sweep
    assert f"{geomean(speed):.2f}x" in text
    assert f"{min(speed):.2f}x-{max(speed):.2f}x" in text
    assert f"{100 * min(frac):.0f}-{100 * max(frac):.0f}%" in text
    assert "promoted" in text
    assert row.count("b-pass") == 6


def test_collected_states(site):
    data = collect(site.root)
    op = data.op(OP)
    assert op.state is PromotionState.PROMOTED and op.incumbent == site.ids["v1"]
    v2 = op.candidate(site.ids["v2"])
    assert v2.parent == site.ids["v1"]
    assert v2.gates["perf_sweep"].badge is Badge.FAIL
    assert any("regression" in r for r in v2.gates["perf_sweep"].reasons)
    assert v2.gates["numerics_unit"].badge is Badge.PASS and not v2.gates["numerics_unit"].stale
    assert data.op("rmsnorm").state is PromotionState.CANDIDATES
    assert data.op("kda_decode").state is PromotionState.NONE
    assert v2.runs == [RUN_ID]
    assert [(f.arch, f.registers) for f in v2.compile if f.registers is not None] == [("sm_90a", 40)]


def test_candidate_page_values(site):
    m = measurements()
    html = (site.out / candidate_page(OP, site.ids["v2"])).read_text()
    # sweep table: every measured point with speedup = incumbent (v1) / candidate time
    rows = re.findall(r'<tr data-point="([^"]+)">(.*?)</tr>', html, re.S)
    assert len(rows) == 2 * 7 * 3            # TP x batch x routing profile
    for key, body in rows:
        b, tp = int(re.search(r"B=(\d+)", key).group(1)), re.search(r"TP(\d+)", key).group(1)
        i = [1, 2, 4, 8, 16, 32, 64].index(b)
        want = m["v1_us"][tp][i] / m["v2_us"][tp][i]
        assert f"{want:.2f}x" in body, (key, body)
    speed = [m["v1_us"][tp][i] / m["v2_us"][tp][i] for tp in ("8", "16") for i in range(7)]
    assert f"{geomean(speed):.3f}x" in _text(html)
    # the per-layer A/B with how it was timed (graph replays) and its noise
    mode = _text(re.search(r'<span class="note" id="layer-mode">(.*?)</span>', html, re.S).group(1))
    assert mode == "(graph, noise 0.4%)"
    # gates, plots, drift, counters, compile facts, diffs, highlighted source
    assert 'id="gate-perf_sweep"' in html and "regression" in html
    assert html.count('<svg class="plot"') >= 4
    assert "Numerics drift over generated tokens: kl" in html
    # the model runs: the noise path's max KL and both paths' expert flips beside the kernel's drift
    runs = re.search(r'<table class="grid" id="model-runs">(.*?)</table>', html, re.S).group(1)
    assert "Max KL (noise path)" in runs and "Expert flips (kernel / noise)" in runs
    lg = _text(re.search(r"<tr><td>long_generation</td>(.*?)</tr>", runs, re.S).group(1))
    assert f"{sum(FLIPS['kernel'])} / {sum(FLIPS['noise'])}" in lg
    assert f"{max(m['drift']['kl']):.3g}" in lg
    assert "- / -" in _text(re.search(r"<tr><td>sampling</td>(.*?)</tr>", runs, re.S).group(1))
    assert f"fused kernels off (they replace this op where they run): {', '.join(FUSED_OFF)}" in _text(html)
    assert re.search(r"<td>numerics_model long_generation on</td><td>moe_router</td><td>kernel</td><td>in_scope</td><td class=\"num\">1024", html)
    assert re.search(r"<td>numerics_model sampling off</td><td>moe_router</td><td>fallback</td><td>disabled</td><td class=\"num\">1027", html)
    assert re.search(r"<td>sm_90a</td>.*?<td class=\"num\">40</td>", html, re.S)
    assert 'class="add">+        self.kernel(x).launch(grid=[1, 1, 1], block=[128, 1, 1])' in html
    assert '<span class="k">def</span>' in html
    assert "[REDACTED]" in html


def test_run_page(site):
    html = (site.out / run_page(RUN_ID)).read_text()
    text = _text(html)
    assert "2000" in re.search(r'id="run-tokens">(.*?)<', html).group(1)
    assert "0.0125 USD" in text
    assert "finished" in re.search(r'id="run-status">(.*?)<', html).group(1)
    assert "LLM tokens used" in html and "Candidates by round (time_us)" in html
    assert f'href="{candidate_page(OP, "")}' not in html
    assert candidate_page(OP, re.search(r'<tr><td><a href="candidate-moe_router-(\w+)', html).group(1))


def test_history_from_git(site):
    html = (site.out / "history.html").read_text()
    row = re.search(r'<table id="history".*?</table>', html, re.S).group(0)
    assert f"promote/{OP}/{site.ids['v1']}" in row
    sha = subprocess.run(["git", "-C", str(site.root), "rev-parse", f"promote/{OP}/{site.ids['v1']}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert sha[:10] in row


def test_without_git_history_degrades(tmp_path, site):
    import shutil

    root = tmp_path / "nogit"
    shutil.copytree(site.root / "kernels_generated", root / "kernels_generated")
    data = collect(root)
    assert data.history == [] and "not a git checkout" in data.history_note
    assert data.op(OP).incumbent == site.ids["v1"]
    # without gates/ and references in the root, freshness is unknown, never a crash
    assert data.op(OP).candidate(site.ids["v1"]).gates["perf_sweep"].badge is Badge.PASS


def test_torn_run_log_is_read_not_cut(tmp_path, site):
    import shutil

    from harness.dashboard.runs import read_run

    folder = tmp_path / RUN_ID
    shutil.copytree(site.root / "runs" / RUN_ID, folder)
    log = folder / "events.jsonl"
    log.write_bytes(log.read_bytes() + b'{"seq": 99, "kind": "sta')      # a writer mid-append
    before = log.read_bytes()
    rv = read_run(folder)
    assert log.read_bytes() == before
    assert rv.finished and rv.tokens == 2000


def test_cli_build_json(site, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from harness.cli import app

    monkeypatch.setenv("HARNESS_ROOT", str(site.root))
    res = CliRunner().invoke(app, ["dashboard", "build", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["candidates"] == 3 and out["runs"] == 1 and out["promotion_events"] >= 1
    assert Path(out["index"]).is_file()


def test_a_run_stopped_mid_round_and_resumed_reads_as_it_happened(tmp_path):
    """The H200 run of session 24 (results/h200/session24/): --time-limit stopped round 1 with two
    drafts not evaluated, and --resume evaluated them and finished the run."""
    import shutil
    from pathlib import Path

    from harness.dashboard.runs import read_run

    real = Path(__file__).resolve().parents[2] / "results" / "h200" / "session24" / "optimize_limit_events.jsonl"
    folder = tmp_path / "20261202-095656-moe_router-cee72e"
    folder.mkdir()
    shutil.copy(real, folder / "events.jsonl")
    rv = read_run(folder)
    said = [e.text for e in rv.events[::-1]]
    assert ("stopped: time limit reached; not evaluated: 6364129076cb, ffcc5bb693af (--resume evaluates them)"
            in said)
    assert "resumed (rounds finished before: none)" in said
    assert rv.finished and rv.stopped is None
    (r1,) = rv.rounds
    assert r1.finished_ts is not None and len(r1.candidates) == 3
    assert all(c.evaluate == "OK" for c in rv.candidates)


def test_benchmarks_page_judges_the_promoted_kernel_on_the_committed_runs(site):
    """The promoted kernel's benchmark rows with their targets, and the per-layer table, as
    harness.scorecard judges them: the floor target 1.3x a floor of >= 2 us, the router's 2x over
    torch.compile, a miss that floor + launch already exceeds marked unreachable."""
    html = (site.out / "benchmarks.html").read_text()
    assert 'href="benchmarks.html"' in (site.out / "index.html").read_text()
    section = re.search(rf'<section class="bench" id="bench-{OP}".*?</section>', html, re.S).group(0)
    assert candidate_page(OP, site.ids["v1"]) in section             # the promoted one, not the newer v2
    b1, b64 = (_text(_row(section, f'data-point="TP8 B={b}"')).split() for b in (1, 64))
    assert f"{BENCH[1]['ours']:.2f}" in b1 and f"{BENCH[1]['compile'] / BENCH[1]['ours']:.2f}x" in b1
    assert f"{BENCH[1]['floor'] + BENCH_LAUNCH_US:.2f}" in b1       # floor + launch
    assert "MISS*" in b1 and "compile ok" in _text(_row(section, 'data-point="TP8 B=1"'))
    assert "floor ok" in " ".join(b64) and "compile MISS" in " ".join(b64)
    assert "floor met at 1/2" in _text(section) and "compile met at 1/2" in _text(section)
    # the fixture's run predates compile_into_outputs: its torch.compile column is the functional form
    assert "torch.compile at 2 of 2 points is its functional form" in _text(section)
    # B=1's eager reference rotated fewer sets than the kernels, partly in L2: tagged, with the legend
    assert "50.0 L2" in _text(_row(section, 'data-point="TP8 B=1"'))
    assert "50.0 L2" not in _text(_row(section, 'data-point="TP8 B=64"'))
    assert "eager (L2): the eager reference rotated fewer input sets" in _text(section)
    # the fixture's promoted kernel covers the op's whole sweep (TP 8 and 16, B 1..64)
    assert f"{OP} coverage: its promoted kernels run at 14 of the 14 points" in _text(section)
    assert "all of them" in _text(section)
    layers = re.search(r'<section class="layers" id="layers-k3-test".*?</section>', html, re.S).group(0)
    assert f"{OP} {site.ids['v1']}" in _text(layers)                 # the candidate the run loaded, still promoted
    assert "promoted now" not in layers
    for (b, layer), (off, on, k_off, k_on) in LAYERS.items():
        assert f" {b} {layer} kda+moe {off:.1f} {on:.1f} {on / off:.2f} {k_off} {k_on} graph " in _text(layers)


def test_each_card_with_runs_gets_its_own_benchmarks_page(site):
    """The H200's runs fill benchmarks.html; the fixture's H100 run of the same kernel fills
    benchmarks-h100.html, and each page names its card and links the other. No number crosses over."""
    h200, h100 = (site.out / "benchmarks.html").read_text(), (site.out / "benchmarks-h100.html").read_text()
    assert "<h1>Benchmarks on the H200</h1>" in h200 and "<h1>Benchmarks on the H100</h1>" in h100
    assert 'href="benchmarks-h100.html"' in h200 and 'href="benchmarks.html"' in h100
    for b in (1, 64):
        assert f"{H100_OURS_US[b]:.2f}" in _text(_row(h100, f'data-point="TP8 B={b}"'))
        assert f"{BENCH[b]['ours']:.2f}" in _text(_row(h200, f'data-point="TP8 B={b}"'))
        assert f"{H100_OURS_US[b]:.2f}" not in h200
    table = re.search(r'<table class="grid bench-table">.*?</table>', h100, re.S).group(0)
    assert set(re.findall(r'<td class="muted small">(results/[^<]*)</td>', table)) == {"results/h100/bench.json"}
    assert "No committed per-layer run" in h100            # the fixture's layer table is an H200 run


def test_a_kernel_benchmarked_only_on_another_card_links_there(tmp_path, site):
    """Without the H200 run, the H200 page's card says so and links the H100 runs that measured it
    (kernels promoted on H100 evidence in sessions 51-52 are such)."""
    import shutil

    from harness.dashboard.render import render_site

    root = tmp_path / "repo"
    for folder in ("kernels_generated", "results"):
        shutil.copytree(site.root / folder, root / folder)
    (root / "results" / "h200" / "bench.json").unlink()
    render_site(collect(root), tmp_path / "out")
    section = re.search(rf'<section class="bench" id="bench-{OP}".*?</section>',
                        (tmp_path / "out" / "benchmarks.html").read_text(), re.S).group(0)
    assert "No committed benchmark on this card measured this candidate. The H100 runs measured 2 points of it." \
        in _text(section)
    assert f'href="benchmarks-h100.html#card-{OP}-{site.ids["v1"]}"' in section
    assert f'id="card-{OP}-{site.ids["v1"]}"' in (tmp_path / "out" / "benchmarks-h100.html").read_text()


def test_benchmarks_page_lists_each_ops_ideas_measured_and_not_kept(site):
    """Under the promoted op's card, its ledger (prompts/kernels/<op>/measured.json) in file order; an op
    with a ledger but no benchmark card gets a section of its own; a malformed ledger is a warning on the
    overview page, not a failed build."""
    html = (site.out / "benchmarks.html").read_text()
    section = re.search(rf'<section class="bench" id="bench-{OP}".*?</section>', html, re.S).group(0)
    ledger = re.search(rf'<details class="ledger" data-op="{OP}">.*?</details>', section, re.S).group(0)
    assert f"not kept: {len(LEDGER)} ideas" in _text(ledger)
    rows = re.findall(r"<tr><td>.*?</tr>", ledger, re.S)
    assert [re.match(r"<tr><td>(.*?)</td>", r).group(1) for r in rows] == [i for i, _, _ in LEDGER]   # file order
    for (idea, outcome, numbers), row in zip(LEDGER, rows):
        text = html_lib.unescape(_text(row))                          # the page escapes "'" as &#39;
        assert outcome.replace("_", " ") in text and numbers in text
        assert "results/h200/bench.json" in row
    other = re.search(rf'<section class="bench" id="ledger-{CPU_OP}".*?</section>', html, re.S).group(0)
    assert "not kept: 1 idea " in _text(other) and CPU_LEDGER[0] in _text(other)
    assert f'data-op="{BAD_LEDGER_OP}"' not in html
    overview = (site.out / "index.html").read_text()
    assert f"prompts/kernels/{BAD_LEDGER_OP}/measured.json: malformed ledger" in overview


def test_an_unreadable_candidate_folder_is_shown_with_its_reason(tmp_path, site):
    """A folder that does not load (here: tampered after creation, and one without a kernel)
    is listed with the loader's reason and its source, and warned about; in-flight
    (hidden) folders and __pycache__ are not candidates."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(site.root / "kernels_generated", root / "kernels_generated")
    base = root / "kernels_generated" / OP
    tampered = base / site.ids["v1"] / "kernel.py"
    tampered.write_text(tampered.read_text() + "# edited after creation\n")
    (base / "empty").mkdir()
    (base / "__pycache__").mkdir()
    (base / ".in-flight").mkdir()
    op = collect(root).op(OP)
    bad = {c.id: c for c in op.candidates if c.load_error}
    assert set(bad) == {site.ids["v1"], "empty"}
    assert "does not match its content" in bad[site.ids["v1"]].load_error
    assert "# edited after creation" in bad[site.ids["v1"]].source
    assert "no kernel.py" in bad["empty"].load_error and bad["empty"].source == ""
    assert {c.id for c in op.candidates} == {c.id for c in collect(site.root).op(OP).candidates} | {"empty"}
    assert bad[site.ids["v1"]].promoted                     # still the incumbent in promoted.json


def test_a_run_compiled_without_a_gpu_names_the_drafts_that_await_one(tmp_path):
    """A run on a machine without a GPU compiles its drafts and leaves their evaluation NOT_RUN:
    the run page says which drafts a resume on a GPU machine would measure, and how."""
    from dataclasses import asdict

    from harness.agent.records import CompileInfo, EvalInfo, StageStatus
    from harness.agent.runlog import EventKind, RunLog
    from harness.dashboard.model import SiteData
    from harness.dashboard.render import render_site
    from harness.dashboard.runs import read_run

    run_id = "20261205-000000-moe_router-abc123"
    log = RunLog.create(tmp_path, run_id)
    log.append(EventKind.RUN_STARTED, config={"op": "moe_router", "agent": "template"}, run_id=run_id,
               gpu_available=False)
    log.append(EventKind.ROUND_STARTED, round=1)
    ids = ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
    for slot, cid in enumerate(ids):
        log.append(EventKind.DRAFT, round=1, slot=slot, id=cid, author="template")
        log.append(EventKind.STAGE, id=cid, stage="static", result={"ok": True, "problems": []})
        status = StageStatus.FAILED if cid == ids[2] else StageStatus.OK     # a failed compile is never measured
        log.append(EventKind.STAGE, id=cid, stage="compile", result=asdict(CompileInfo("sm_90a", status, registers=40)))
        if status is StageStatus.OK:
            log.append(EventKind.STAGE, id=cid, stage="evaluate",
                       result=asdict(EvalInfo(StageStatus.NOT_RUN, "NOT_RUN", "no CUDA GPU on this machine")))
    rv = read_run(tmp_path / run_id)
    assert rv.not_measured == ids[:2]
    render_site(SiteData(root=str(tmp_path), generated_utc="", ops=[], runs=[rv], history=[]), tmp_path / "site")
    html = (tmp_path / "site" / run_page(run_id)).read_text()
    shown = _text(re.search(r'id="run-not-measured">(.*?)</dd>', html, re.S).group(1))
    assert shown.startswith("2 drafts compiled without a GPU") and ids[0] in shown and ids[2] not in shown
    assert f"harness optimize --op moe_router --resume {run_id}" in shown
