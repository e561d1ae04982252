from __future__ import annotations

import dataclasses
import json

from gates import GateContext, Verdict, isolation, load_config, static

from gate_repo_helpers import KERNEL_SRC, git, make_candidate

OP = "moe_router"
FROZEN = ["gates/", "harness/", "reference_impls/"]


def _ctx(root, cid):
    return GateContext(op=OP, candidate_id=cid, root=root, config=load_config(root / "gates" / "gate_config.toml"))


def test_decide_confined_change_passes():
    v, reasons, _ = isolation.decide(OP, "abc", ["kernels_generated/moe_router/abc/kernel.py"], FROZEN, None, None)
    assert v is Verdict.PASS and not reasons


def test_decide_frozen_and_outside_paths_fail():
    v, reasons, f = isolation.decide(OP, "abc", ["gates/gate_config.toml", "README.md",
                                                 "kernels_generated/moe_router/other/kernel.py"], FROZEN, None, None)
    assert v is Verdict.FAIL
    assert f.frozen == ["gates/gate_config.toml"]
    assert any("frozen" in r and "gate_config" in r for r in reasons)
    assert any("README.md" in r for r in reasons) and any("other/kernel.py" in r for r in reasons)


def test_decide_manifest_only_own_entry():
    before = json.dumps([{"op": "rmsnorm", "candidate": "r1", "scope": {}}]).encode()
    ok = json.dumps([{"op": "rmsnorm", "candidate": "r1", "scope": {}}, {"op": OP, "candidate": "abc", "scope": {}}]).encode()
    other = json.dumps([{"op": "rmsnorm", "candidate": "r2", "scope": {}}]).encode()
    wrong = json.dumps([{"op": "rmsnorm", "candidate": "r1", "scope": {}}, {"op": OP, "candidate": "zzz", "scope": {}}]).encode()
    m = "kernels_generated/promoted.json"
    assert isolation.decide(OP, "abc", [m], FROZEN, before, ok)[0] is Verdict.PASS
    assert isolation.decide(OP, "abc", [m], FROZEN, before, other)[0] is Verdict.FAIL
    assert isolation.decide(OP, "abc", [m], FROZEN, before, wrong)[0] is Verdict.FAIL


def test_decide_manifest_entries_of_one_op_by_scope():
    """An op may hold a broad and a narrow entry: this candidate may add one, replace the op's
    entry of its own scope or its own entry; it may not drop or rewrite another of the op's."""
    broad = {"op": OP, "candidate": "b", "scope": {"batch": [1, 64]}}
    narrow = {"op": OP, "candidate": "n", "scope": {"batch": [1, 8]}}
    m = "kernels_generated/promoted.json"

    def verdict(before, after):
        return isolation.decide(OP, "abc", [m], FROZEN, json.dumps(before).encode(), json.dumps(after).encode())[0]
    mine_narrow = {"op": OP, "candidate": "abc", "scope": {"batch": [1, 8]}}
    mine_other = {"op": OP, "candidate": "abc", "scope": {"batch": [1, 2]}}
    assert verdict([broad], [broad, mine_narrow]) is Verdict.PASS            # beside the broad one
    assert verdict([broad, narrow], [broad, mine_narrow]) is Verdict.PASS    # takes the narrow one's scope
    assert verdict([broad, mine_narrow], [broad, mine_other]) is Verdict.PASS  # its own entry, new scope
    assert verdict([broad, narrow], [broad, mine_other]) is Verdict.FAIL     # drops another scope's entry
    assert verdict([broad, narrow], [mine_narrow]) is Verdict.FAIL           # drops the broad one
    assert verdict([broad], [broad, {**narrow, "candidate": "zzz"}]) is Verdict.FAIL


def test_isolation_run_clean_candidate_passes(repo):
    root, _ = repo
    cid = make_candidate(root, KERNEL_SRC + "\n# variant\n")           # new, uncommitted candidate
    res = isolation.run(_ctx(root, cid))
    assert res.verdict is Verdict.PASS, res.reasons
    assert res.numbers["changed_paths"] == 2


def test_isolation_run_catches_changed_threshold(repo):
    root, cid = repo
    cfg = root / "gates" / "gate_config.toml"
    cfg.write_text(cfg.read_text().replace("value = 1.05", "value = 0.5"))
    res = isolation.run(_ctx(root, cid))
    assert res.verdict is Verdict.FAIL
    assert res.numbers["frozen_paths_changed"] == ["gates/gate_config.toml"]


def test_isolation_run_catches_changed_reference_after_commit(repo):
    root, cid = repo
    base = git(root, "rev-parse", "HEAD")
    ref = root / "reference_impls" / "moe_router.py"
    ref.write_text(ref.read_text().replace("ROUTED_SCALING_FACTOR = 1.0", "ROUTED_SCALING_FACTOR = 1.5"))
    git(root, "commit", "-qam", "sneak")
    ctx = _ctx(root, cid)
    ctx.base = base
    res = isolation.run(ctx)
    assert res.verdict is Verdict.FAIL and "reference_impls/moe_router.py" in res.numbers["frozen_paths_changed"]


def test_static_passes_clean_and_rejects_os_import(repo):
    root, cid = repo
    assert static.run(_ctx(root, cid)).verdict is Verdict.PASS
    bad = make_candidate(root, "import os\n" + KERNEL_SRC)
    res = static.run(_ctx(root, bad))
    assert res.verdict is Verdict.FAIL and "forbidden_import" in res.numbers["rules"]


def test_static_rejects_folder_whose_content_changed(repo):
    root, cid = repo
    k = root / "kernels_generated" / OP / cid / "kernel.py"
    k.write_text(k.read_text() + " ")
    res = static.run(_ctx(root, cid))
    assert res.verdict is Verdict.FAIL and "does not match its content" in res.reasons[0]


def test_isolation_run_with_a_base_that_is_no_commit_is_an_error_not_a_skip(repo):
    """NOT_RUN means this machine cannot check (no git history). A base the caller named that
    names no commit is a broken request: ERROR, which no promotion accepts either."""
    root, cid = repo
    res = isolation.run(dataclasses.replace(_ctx(root, cid), base="no-such-ref"))
    assert res.verdict is Verdict.ERROR
    assert "no-such-ref" in res.reasons[0] and "not a commit" in res.reasons[0]


def test_isolation_run_without_git_history_is_not_run(tmp_path):
    (tmp_path / "gates").mkdir()
    import shutil
    from pathlib import Path
    shutil.copy(Path(__file__).resolve().parents[2] / "gates" / "gate_config.toml", tmp_path / "gates")
    res = isolation.run(_ctx(tmp_path, "abc"))
    assert res.verdict is Verdict.NOT_RUN and "no git history" in res.reasons[0]
