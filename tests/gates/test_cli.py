"""`harness gate / promote / demote / ci verify` through the real CLI entry point, in a
temp repo (HARNESS_ROOT); exit codes and --json output are what CI and people read."""
from __future__ import annotations

import json
import os

import pytest

from gate_repo_helpers import git
from test_promotion import _gate

OP = "moe_router"


def test_gate_cpu_gates_write_a_readonly_record(repo, run_cli):
    root, cid = repo
    code, out, err = run_cli(["gate", OP, cid, "--only", "isolation,static,numerics_unit,perf_sweep", "--json"])
    assert code == 0
    rec = json.loads(out)
    verdicts = {g["gate"]: g["verdict"] for g in rec["gates"]}
    assert verdicts["isolation"] == "pass" and verdicts["static"] == "pass"
    assert verdicts["numerics_unit"] == "not_run" and verdicts["perf_sweep"] == "not_run"   # no GPU: never a pass
    # one progress line per gate on stderr, in order (what a log cut short by a timeout shows)
    assert [line.split()[2:4] for line in err.splitlines() if line.startswith("harness gate: ")] == \
        [["isolation", "pass"], ["static", "pass"], ["numerics_unit", "not_run"], ["perf_sweep", "not_run"]]
    path = rec["record"]
    assert os.path.isfile(path) and not os.access(path, os.W_OK) or os.geteuid() == 0
    assert oct(os.stat(path).st_mode & 0o777) == "0o444"
    assert json.loads(open(path).read())["record_sha256"] == rec["record_sha256"]


def test_gate_failing_gate_exits_1_and_unknown_names_exit_2(repo, run_cli):
    root, cid = repo
    cfg = root / "gates" / "gate_config.toml"
    cfg.write_text(cfg.read_text().replace("value = 1.05", "value = 0.5"))      # moving the goalposts
    code, out, _ = run_cli(["gate", OP, cid, "--only", "isolation", "--no-write"])
    assert code == 1 and "FAIL" in out and "gate_config.toml" in out
    code, _, err = run_cli(["gate", OP, "nope", "--only", "static"])
    assert code == 2 and err.count("\n") == 1 and "not found" in err
    code, _, err = run_cli(["gate", OP, cid, "--only", "speed"])
    assert code == 2 and "unknown gate 'speed'" in err


def test_promote_refuses_cpu_only_evidence(repo, run_cli):
    root, cid = repo
    assert run_cli(["gate", OP, cid, "--only", "isolation,static,scope", "--json"])[0] in (0, 1)
    code, out, err = run_cli(["promote", OP, cid, "--json"])
    assert code == 2 and "refusing to promote" in err
    problems = json.loads(out)["problems"]
    assert any("numerics_unit" in p for p in problems) and any("perf_sweep" in p for p in problems)
    assert not (root / "kernels_generated" / "promoted.json").exists()


def test_promote_refusal_lists_many_problems_under_a_header_and_counts_them(repo, run_cli):
    """The refusal printed each problem on stdout as `harness: OP/ID: problem`, then repeated the
    first on stderr with "(and N more problems)". Now, on stderr: a header, one indented line per
    problem, and the count as the error line; a single problem is the error line alone."""
    root, cid = repo
    code, out, _ = run_cli(["promote", OP, cid, "--no-commit", "--json"])
    problems = json.loads(out)["problems"]
    assert code == 2 and len(problems) == 6                              # no evidence for any gate
    code, out, err = run_cli(["promote", OP, cid, "--no-commit"])
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.splitlines() == [f"harness: {OP}/{cid} cannot be promoted:", *[f"  - {p}" for p in problems],
                                f"harness: error: refusing to promote {OP}/{cid}: 6 problems (listed above)"]
    _gate(root, cid, skip="perf_sweep")                                 # every gate but one
    code, out, err = run_cli(["promote", OP, cid, "--no-commit"])
    assert code == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"harness: error: refusing to promote {OP}/{cid}: gate perf_sweep: no evidence"), err
    assert not (root / "kernels_generated" / "promoted.json").exists()


def test_promote_ci_verify_demote_round_trip(repo, run_cli):
    root, cid = repo
    _gate(root, cid)
    code, out, _ = run_cli(["promote", OP, cid, "--json"])
    assert code == 0
    res = json.loads(out)
    assert res["branch"] == f"promote/{OP}/{cid}" and git(root, "rev-parse", res["branch"]) == res["commit"]
    code, out, _ = run_cli(["ci", "verify", "--no-compile", "--json"])
    assert code == 0 and json.loads(out) == {"promoted": 1, "problems": [], "ok": True}
    kernel = root / "kernels_generated" / OP / cid / "kernel.py"
    kernel.write_bytes(kernel.read_bytes() + b" ")                               # one byte after gating
    code, out, _ = run_cli(["ci", "verify", "--no-compile"])
    lines = out.strip().splitlines()
    assert code == 1 and lines[-1].startswith("ci verify: 1 promoted kernel(s)")
    assert all(line.startswith(f"{OP}/{cid}: ") for line in lines[:-1]) and len(lines) >= 2
    code, out, _ = run_cli(["demote", OP, "--json"])
    assert code == 0 and json.loads(out)["action"] == "demote"
    assert json.loads((root / "kernels_generated" / "promoted.json").read_text()) == []
    code, _, err = run_cli(["demote", OP])
    assert code == 2 and "no promoted kernel" in err
    code, _, err = run_cli(["demote", "moe_ruoter"])
    assert code == 2 and "unknown op 'moe_ruoter'" in err


@pytest.fixture
def no_gitpython(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "git", None)        # `import git` raises ImportError


def test_git_command_line_backend_isolation_evidence_promotion(repo, no_gitpython, run_cli):
    from gates import GateContext, Verdict, isolation, load_config
    from gates._git import Git

    root, cid = repo
    assert Git(root).backend == "git-cli"
    ctx = GateContext(op=OP, candidate_id=cid, root=root, config=load_config(root / "gates" / "gate_config.toml"))
    res = isolation.run(ctx)
    assert res.verdict is Verdict.PASS and res.numbers["git_backend"] == "git-cli"
    (root / "reference_impls" / "moe_router.py").write_text("# changed\n", encoding="utf-8")
    bad = isolation.run(ctx)
    assert bad.verdict is Verdict.FAIL and "reference_impls/moe_router.py" in bad.numbers["frozen_paths_changed"]
    git(root, "checkout", "--", "reference_impls/moe_router.py")
    _gate(root, cid)
    code, out, _ = run_cli(["promote", OP, cid, "--json"])
    assert code == 0
    branch = json.loads(out)["branch"]
    assert "isolation: pass" in git(root, "log", "-1", "--format=%B", branch)
    assert git(root, "status", "--porcelain", "--", "gates", "harness") == ""   # working tree untouched


def test_gate_cut_short_by_sigterm_keeps_the_finished_gates(repo, run_cli, monkeypatch):
    """`timeout` ends a gate run with SIGTERM: the gates finished before it are written as an
    evidence record (promote takes each gate's latest valid record), the exit code says so."""
    import signal
    import time

    import gates.suite as suite
    from gates import GateName

    real = suite.run_gates

    def isolation_then_sigterm(ctx, only=None, on_done=None):
        real(ctx, [GateName("isolation")], on_done=on_done)
        os.kill(os.getpid(), signal.SIGTERM)          # arrives while the next gate "runs"
        time.sleep(5)
        raise AssertionError("SIGTERM did not interrupt the run")

    monkeypatch.setattr(suite, "run_gates", isolation_then_sigterm)
    root, cid = repo
    before = signal.getsignal(signal.SIGTERM)
    code, out, err = run_cli(["gate", OP, cid, "--json"])
    assert code == 143
    assert signal.getsignal(signal.SIGTERM) == before            # the handler is put back
    rec = json.loads(out)
    assert rec["interrupted"] is True and [g["gate"] for g in rec["gates"]] == ["isolation"]
    assert rec["gates"][0]["verdict"] == "pass" and os.path.isfile(rec["record"])
    assert "interrupted after 1 finished gate(s); writing their evidence" in err


def test_ci_pins_names_the_gates_an_edit_would_stale(repo, run_cli):
    root, cid = repo
    code, out, _ = run_cli(["ci", "pins", str(root / "harness/toolchain/timing.py"),
                        str(root / "gates/_git.py"), str(root / "harness/promotion.py"), "--json"])
    assert code == 0
    assert {p["path"]: p["gates"] for p in json.loads(out)} == {
        "harness/toolchain/timing.py": ["perf_sweep"],
        "gates/_git.py": ["isolation"],
        "harness/promotion.py": []}
    code, out, _ = run_cli(["ci", "pins"])
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == \
        ["isolation", "static", "scope", "numerics_unit", "numerics_model", "perf_sweep"]
    code, _, err = run_cli(["ci", "pins", "/etc/hostname"])
    assert code == 2 and "not inside the repository" in err and "Traceback" not in err


def test_ci_verify_names_the_one_gate_to_rerun(repo, run_cli):
    root, cid = repo
    _gate(root, cid)
    from harness.promotion import promote

    promote(root, OP, cid, commit=False)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "promote")
    g = root / "gates" / "_git.py"
    g.write_text(g.read_text() + "\n# an edit to isolation's git helper\n")
    code, out, _ = run_cli(["ci", "verify", "--no-compile", "--json"])
    problems = json.loads(out)["problems"]
    stale = [p for p in problems if "evidence is stale" in p]
    assert code == 1 and len(stale) == 1 and "--only isolation" in stale[0] and "changed: gates/_git.py" in stale[0]


@pytest.mark.parametrize("damage", ["missing", "not_toml", "no_version"])
@pytest.mark.parametrize("argv", [["gate", OP, "{cid}", "--only", "static", "--no-write"],
                                  ["gate", OP, "{cid}", "--only", "static", "--no-write", "--json"],
                                  ["promote", OP, "{cid}", "--no-commit"],
                                  ["ci", "verify", "--no-compile", "--json"]])
def test_a_missing_or_malformed_gate_config_is_one_line_exit_2(repo, run_cli, damage, argv):
    root, cid = repo
    if argv[0] == "ci":                              # ci verify reads the config when something is promoted
        (root / "kernels_generated" / "promoted.json").write_text(json.dumps(
            [{"op": OP, "candidate": cid, "scope": {}}]))
    cfg = root / "gates" / "gate_config.toml"
    if damage == "missing":
        cfg.unlink()
    else:
        cfg.write_text("[[[ not toml" if damage == "not_toml" else "[perf_sweep]\n")
    code, out, err = run_cli([*[a.format(cid=cid) for a in argv]])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and "gate_config.toml" in lines[0], err


@pytest.mark.parametrize("argv", [["gate", OP, "{cid}", "--only", "isolation", "--no-write"],
                                  ["gate", OP, "{cid}", "--only", "isolation", "--no-write", "--json"],
                                  ["ci", "verify", "--no-compile"],
                                  ["ci", "verify", "--no-compile", "--json"]])
def test_a_base_that_is_no_commit_is_one_line_exit_2(repo, run_cli, argv):
    root, cid = repo
    (root / "kernels_generated" / "promoted.json").write_text(json.dumps([{"op": OP, "candidate": cid, "scope": {}}]))
    code, out, err = run_cli([*[a.format(cid=cid) for a in argv], "--base", "no-such-rev"])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error:") and "no-such-rev" in lines[0], err
    code, _, err = run_cli(["gate", OP, cid, "--only", "isolation", "--no-write", "--base", "HEAD"])
    assert code == 0, err                                # a real commit is still taken


@pytest.mark.parametrize("model_config", ["tiny:0", "tiny:-1", "k3-tp8-rank:0"])
def test_a_model_config_layer_count_below_one_is_one_line_exit_2(repo, run_cli, model_config):
    root, cid = repo
    code, out, err = run_cli(["gate", OP, cid, "--only", "static", "--no-write", "--model-config", model_config])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"model config '{model_config}'" in lines[0] and ">= 1" in lines[0], err


def test_a_failed_commit_leaves_the_manifest_as_it_was(repo, run_cli, monkeypatch):
    from gates._git import Git, GitError

    root, cid = repo
    _gate(root, cid)
    manifest = root / "kernels_generated" / "promoted.json"

    def refuse(self, branch, files, message, parent="HEAD"):
        raise GitError(f"cannot lock ref 'refs/heads/{branch}'")
    with monkeypatch.context() as m:
        m.setattr(Git, "commit_files_on_branch", refuse)
        code, out, err = run_cli(["promote", OP, cid])
    assert code == 2 and "could not commit" in err and "Traceback" not in out + err
    assert not manifest.exists()                               # not promoted half-way
    assert run_cli(["promote", OP, cid, "--no-commit"])[0] == 0
    before = manifest.read_bytes()
    with monkeypatch.context() as m:
        m.setattr(Git, "commit_files_on_branch", refuse)
        code, out, err = run_cli(["demote", OP])
    assert code == 2 and "could not commit" in err and "Traceback" not in out + err
    assert manifest.read_bytes() == before                     # still promoted


@pytest.mark.parametrize("path", ["harness/no_such_file.py", "harness/toolchain"])
def test_ci_pins_of_a_missing_file_or_a_folder_is_one_line_exit_2(repo, run_cli, path):
    root, _ = repo
    for argv in (["ci", "pins", str(root / path)], ["ci", "pins", str(root / path), "--json"]):
        code, out, err = run_cli([*argv])
        assert code == 2 and out == "" and "Traceback" not in err
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("harness: error:") and path in lines[0], err


@pytest.mark.parametrize("verb", [["gate", OP, " ", "--no-write"], ["promote", OP, "", "--no-commit"]])
def test_an_empty_candidate_id_is_named_as_such(repo, run_cli, verb):
    code, out, err = run_cli([*verb])
    assert code == 2 and "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "empty candidate id" in lines[0], err


def test_ci_promote_with_nothing_gated_says_so(repo, run_cli):
    """It printed nothing and exited 0: a CI log could not tell 'nothing to do' from 'did not run'."""
    code, out, err = run_cli(["ci", "promote"])
    assert code == 0 and "nothing to promote" in out, (out, err)
    code, out, _ = run_cli(["ci", "promote", "--json"])
    assert code == 0 and json.loads(out) == []
