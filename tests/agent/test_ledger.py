"""The ops' ledgers of ideas measured on a GPU and not kept (harness/agent/ledger.py), and their
place in the drafting prompt."""
from __future__ import annotations

import json

import pytest

import reference_impls
from harness import paths
from harness.agent.ledger import LEDGER_NAME, Outcome, ledger_path, load_ledger
from harness.agent.prompting import draft_prompt
from harness.errors import UserError
from harness.hardware import GPUS

H200 = GPUS["h200"]


def _ops_with_ledgers() -> list[str]:
    return sorted(p.parent.name for p in (paths.REPO_ROOT / "prompts" / "kernels").glob(f"*/{LEDGER_NAME}"))


def test_every_committed_ledger_parses_and_cites_a_committed_record():
    ops = _ops_with_ledgers()
    assert {"attn_res", "skinny_gemm", "gemm_situ_and_mul", "kda_decode"} <= set(ops)
    for op in ops:
        reference_impls.get(op)                                   # the folder names a real op
        entries = load_ledger(op)
        assert entries, op
        for m in entries:
            record = paths.REPO_ROOT / m.record
            assert record.is_file() and record.stat().st_size > 0, (op, m.record)
            assert m.record.startswith("results/"), (op, m.record)


def test_attn_res_ledger_holds_the_tensor_core_gram_twice_measured():
    """The entry that would have saved session 34 a device call: session 16's result, measured again."""
    mma = [m for m in load_ledger("attn_res") if "tensor cores" in m.idea]
    assert len(mma) == 1 and mma[0].outcome is Outcome.SLOWER
    assert "session16/bench_attnres_mma" in mma[0].numbers and "session34" in mma[0].record


def test_draft_prompt_lists_the_ledger_and_leaves_it_out_for_an_op_without_one():
    defn = reference_impls.get("attn_res")
    text = draft_prompt(defn, H200, 8, None, None, [])
    assert "## Measured on a GPU before and not kept (earlier sessions)" in text
    for m in load_ledger("attn_res"):
        assert f"- {m.line()}" in text
    assert not ledger_path("situ_and_mul").exists()
    plain = draft_prompt(reference_impls.get("situ_and_mul"), H200, 8, None, None, [])
    assert "Measured on a GPU before" not in plain


def test_missing_ledger_is_empty_and_a_malformed_one_is_a_user_error(tmp_path):
    assert load_ledger("attn_res", root=tmp_path) == []
    path = ledger_path("attn_res", root=tmp_path)
    path.parent.mkdir(parents=True)
    good = {"idea": "x", "outcome": "slower", "numbers": "1 us", "record": "results/x.log"}
    for bad in ({"entries": [dict(good, outcome="faster")]},            # not an Outcome
                {"entries": [dict(good, numbers="")]},                   # empty field
                {"entries": [{k: v for k, v in good.items() if k != "record"}]},
                {"entries": {"idea": "x"}},                             # not a list
                "not json"):
        path.write_text(bad if isinstance(bad, str) else json.dumps(bad))
        with pytest.raises(UserError, match="malformed ledger"):
            load_ledger("attn_res", root=tmp_path)
    path.write_text(json.dumps({"entries": [good]}))
    (m,) = load_ledger("attn_res", root=tmp_path)
    assert m.outcome is Outcome.SLOWER and m.line() == "x: slower, 1 us (results/x.log)"


def test_add_entry_appends_atomically_and_refuses_a_record_outside_the_repo(tmp_path):
    from harness.agent.ledger import Measured, add_entry

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "bench.log").write_text("numbers\n")
    m = Measured(idea="wider vectors", outcome=Outcome.NO_GAIN, numbers="0.99-1.01x", record="results/bench.log")
    assert add_entry("kda_decode", m, root=tmp_path) == 1           # creates the ledger
    path = ledger_path("kda_decode", root=tmp_path)
    assert add_entry("kda_decode", Measured("fold", Outcome.SLOWER, "0.96", "results/bench.log"), root=tmp_path) == 2
    assert [e.idea for e in load_ledger("kda_decode", root=tmp_path)] == ["wider vectors", "fold"]
    assert json.loads(path.read_text())["doc"] and not list(path.parent.glob("*.tmp"))
    for record in ("results/missing.log", "../outside.log", str(tmp_path / "results" / "bench.log")):
        with pytest.raises(UserError, match="is not a file under"):
            add_entry("kda_decode", Measured("x", Outcome.SLOWER, "1", record), root=tmp_path)
    path.write_text("{broken")
    with pytest.raises(UserError, match="malformed ledger"):
        add_entry("kda_decode", m, root=tmp_path)
    assert path.read_text() == "{broken"                          # a malformed ledger is left as it was


def test_cli_ledger_add_writes_the_checkout_ledger_and_rejects_bad_input(tmp_path, monkeypatch, run_cli):
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.log").write_text("1 us\n")
    argv = ["ops", "ledger-add", "attn_res", "--idea", "an idea", "--numbers", "1 us", "--record", "results/r.log"]
    code, out, _ = run_cli(argv + ["--outcome", "mixed", "--json"])
    assert code == 0 and json.loads(out)["entries"] == 1
    (m,) = load_ledger("attn_res", root=tmp_path)
    assert m.outcome is Outcome.MIXED and m.record == "results/r.log"
    code, _, err = run_cli(argv + ["--outcome", "faster"])
    assert code == 2 and "choose from slower, mixed, no_gain, faster_not_promoted" in err
    code, _, err = run_cli(["ops", "ledger-add", "no_such_op", "--idea", "i", "--outcome", "slower",
                            "--numbers", "n", "--record", "results/r.log"])
    assert code == 2 and "unknown op" in err
    assert len(load_ledger("attn_res", root=tmp_path)) == 1
