"""`harness candidates OP`: every candidate folder of the op, the promoted one marked (from
kernels_generated/promoted.json), its template family and evidence record count."""
from __future__ import annotations

import json

from harness import paths
from harness.promotion import read_manifest


def test_json_marks_the_promoted_candidate_and_families(run_cli) -> None:
    code, out, _ = run_cli(["candidates", "add_rmsnorm", "--json"])
    assert code == 0
    rows = json.loads(out)
    folders = sorted(p.name for p in (paths.kernels_dir() / "add_rmsnorm").iterdir() if (p / "candidate.json").is_file())
    assert sorted(r["id"] for r in rows) == folders
    manifest = {e["op"]: e["candidate"] for e in read_manifest(paths.root())}
    assert [r["id"] for r in rows if r["promoted"]] == [manifest["add_rmsnorm"]]
    promoted = next(r for r in rows if r["promoted"])
    assert promoted["evidence_records"] >= 1                       # promotion needs a record
    assert {r["family"] for r in rows} >= {"rowreg", "clusterpush", "pushhybrid"}


def test_table_stars_the_promoted_row(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run_cli(["candidates", "attn_res"])
    assert code == 0
    manifest = {e["op"]: e["candidate"] for e in read_manifest(paths.root())}
    starred = [line.split()[1] for line in out.splitlines() if line.startswith("* ") and "promoted (" not in line]
    assert starred == [manifest["attn_res"]]


def test_unknown_op_is_one_line_exit_2(run_cli) -> None:
    code, out, err = run_cli(["candidates", "no_such_op"])
    assert code == 2 and out == ""
    assert "unknown op 'no_such_op'" in err and "Traceback" not in err


def _copy_op(tmp_path, monkeypatch, op: str):
    """A temp root holding a copy of one op's candidates (HARNESS_ROOT)."""
    import shutil

    root = tmp_path / "root"
    shutil.copytree(paths.kernels_dir() / op, root / "kernels_generated" / op,
                    ignore=shutil.ignore_patterns("__pycache__", "evidence"))
    monkeypatch.setenv("HARNESS_ROOT", str(root))
    return root / "kernels_generated" / op


def test_an_unreadable_candidate_folder_is_named_and_exits_2(tmp_path, run_cli, monkeypatch) -> None:
    base = _copy_op(tmp_path, monkeypatch, "attn_res")
    broken = sorted(p for p in base.iterdir() if p.is_dir())[0]
    (broken / "candidate.json").write_text("{oops")
    for argv in (["candidates", "attn_res"], ["candidates", "attn_res", "--json"]):
        code, out, err = run_cli(argv)
        assert code == 2 and "Traceback" not in out + err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("harness: error: 1 candidate folder(s)"), err
        assert str(broken / "candidate.json") in lines[0]
        if "--json" in argv:                           # the readable ones are still listed
            assert broken.name not in {r["id"] for r in json.loads(out)} and json.loads(out)
        else:
            assert broken.name not in out and out.strip()


def test_an_op_without_candidates_says_so(tmp_path, run_cli, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    code, out, err = run_cli(["candidates", "rmsnorm"])
    assert code == 0 and "no candidates of rmsnorm" in out, out + err
    code, out, _ = run_cli(["candidates", "rmsnorm", "--json"])
    assert code == 0 and json.loads(out) == []
