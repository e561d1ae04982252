"""scripts/gpu/gpu_tests.sh on the CPU, with a stand-in pytest (PYTHON points at a wrapper that fakes
`python -m pytest` and runs everything else with the real interpreter): its summary names every
failing test and every collected test that no JUnit report names (a group stopped at its deadline:
session 33's run reported "66 ran" of 67 without naming the one that did not finish)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "gpu_tests.sh"

FAKE_PYTEST = r'''
import os, sys
from pathlib import Path
from xml.sax.saxutils import quoteattr

args = sys.argv[1:]
ids = Path(os.environ["FAKE_IDS"]).read_text().split()
if "--collect-only" in args:
    print("\n".join(ids))
    sys.exit(0)
xml = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
asked = [a for a in args if "::" in a]
unfinished = set(os.environ.get("FAKE_UNFINISHED", "").split())
failing = set(os.environ.get("FAKE_FAILING", "").split())
cases = []
for i in asked:
    if i in unfinished:
        continue
    path, *inner, name = i.split("::")
    cls = ".".join([path.removesuffix(".py").replace("/", "."), *inner])
    body = "<failure message='boom'/>" if i in failing else ""
    cases.append(f"<testcase classname={quoteattr(cls)} name={quoteattr(name)} time='0.1'>{body}</testcase>")
fails = sum(1 for i in asked if i in failing and i not in unfinished)
Path(xml).write_text(f"<testsuites><testsuite name='pytest' tests='{len(cases)}' failures='{fails}' "
                     f"errors='0' skipped='0' time='1.0'>{''.join(cases)}</testsuite></testsuites>")
print(f"{len(cases)} ran")
'''

IDS = [
    "tests/gates/test_layer_ab.py::test_graph_replays_on_a_gpu_and_see_gpu_time",   # a TIMING test
    "tests/kernels/test_a.py::test_gpu[abc123]",
    "tests/kernels/test_b.py::TestKernel::test_gpu_sums",
    "tests/selftest/test_cheats.py::test_gpu_cheats_rejected_on_gpu",
]


def _run(tmp_path: Path, unfinished: str = "", failing: str = "") -> tuple[int, str]:
    fake = tmp_path / "fake_pytest.py"
    fake.write_text(FAKE_PYTEST)
    wrapper = tmp_path / "py"
    wrapper.write_text(f'#!/usr/bin/env bash\nif [ "$1" = -m ] && [ "$2" = pytest ]; then shift 2; '
                       f'exec "{sys.executable}" "{fake}" "$@"; fi\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(IDS) + "\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=str(wrapper), OUT=str(out), JOBS="2", DEADLINE_S="60", FAKE_IDS=str(ids),
               FAKE_UNFINISHED=unfinished, FAKE_FAILING=failing)
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    return r.returncode, (out / "gpu_tests" / "summary.txt").read_text()


def test_all_finished_passes_and_names_nothing(tmp_path):
    rc, summary = _run(tmp_path)
    assert rc == 0, summary
    assert "all: 4 collected, 4 ran: 4 passed" in summary
    assert "NOT FINISHED" not in summary and "FAILED" not in summary


def test_a_test_no_report_names_is_listed_and_fails_the_run(tmp_path):
    rc, summary = _run(tmp_path, unfinished=IDS[3] + " " + IDS[2])
    assert rc == 1
    assert "all: 4 collected, 2 ran: 2 passed" in summary
    assert f"NOT FINISHED {IDS[3]} " in summary and f"NOT FINISHED {IDS[2]} " in summary
    assert f"NOT FINISHED {IDS[1]}" not in summary          # a parametrized id matched to its JUnit case


def test_a_failure_is_named(tmp_path):
    rc, summary = _run(tmp_path, failing=IDS[1])
    assert rc == 1
    assert "FAILED tests.kernels.test_a::test_gpu[abc123]" in summary and "NOT FINISHED" not in summary
