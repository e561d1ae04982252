"""`harness candidates OP`: every candidate folder of the op, the promoted one marked (from
kernels_generated/promoted.json), its template family and evidence record count."""
from __future__ import annotations

import json

from harness import paths
from harness.cli import main
from harness.promotion import read_manifest


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_json_marks_the_promoted_candidate_and_families(capsys) -> None:
    code, out, _ = _run(["candidates", "add_rmsnorm", "--json"], capsys)
    assert code == 0
    rows = json.loads(out)
    folders = sorted(p.name for p in (paths.kernels_dir() / "add_rmsnorm").iterdir() if (p / "candidate.json").is_file())
    assert sorted(r["id"] for r in rows) == folders
    manifest = {e["op"]: e["candidate"] for e in read_manifest(paths.root())}
    assert [r["id"] for r in rows if r["promoted"]] == [manifest["add_rmsnorm"]]
    promoted = next(r for r in rows if r["promoted"])
    assert promoted["evidence_records"] >= 1                       # promotion needs a record
    assert {r["family"] for r in rows} >= {"rowreg", "clusterpush", "pushhybrid"}


def test_table_stars_the_promoted_row(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = _run(["candidates", "attn_res"], capsys)
    assert code == 0
    manifest = {e["op"]: e["candidate"] for e in read_manifest(paths.root())}
    starred = [line.split()[1] for line in out.splitlines() if line.startswith("* ") and "promoted (" not in line]
    assert starred == [manifest["attn_res"]]


def test_unknown_op_is_one_line_exit_2(capsys) -> None:
    code, out, err = _run(["candidates", "no_such_op"], capsys)
    assert code == 2 and out == ""
    assert "unknown op 'no_such_op'" in err and "Traceback" not in err
