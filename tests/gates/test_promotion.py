"""promote / demote / ci verify on synthetic evidence in a temp repo (GPU gates' numbers are
synthetic measurements that their decision functions accept, or not)."""
from __future__ import annotations

import json

import pytest

from gates import GateContext, GateResult, Verdict, load_config
from gates.points import key, scope_points
from harness import evidence as ev
from harness.errors import UserError
from harness.promotion import assess, ci_verify, demote, promote, read_manifest
from harness.registry import Registry

OP = "moe_router"


def _passing_results(root, cid, perf_regress: bool = False, skip: str = "") -> list[GateResult]:
    import reference_impls
    from gates import isolation, scope, static
    from harness.toolchain.candidate import load_candidate

    cfg = load_config(root / "gates" / "gate_config.toml")
    ctx = GateContext(op=OP, candidate_id=cid, root=root, config=cfg)
    cand = load_candidate(OP, root / "kernels_generated" / OP / cid)
    pts = [key(p) for p in scope_points(reference_impls.get(OP), cand.scope)]
    samples = [{"point": p, "kind": "random", "seed": 1000 * i + j, "ok": True, "mutated": [], "deterministic": True}
               for i, p in enumerate(pts) for j in range(10)]
    samples += [{"point": p, "kind": k, "seed": 7, "ok": True, "mutated": [], "deterministic": True}
                for p in pts for k in ("ties", "large", "equal_rows")]
    perf = [{"point": p, "incumbent_us": 20.0, "candidate_us": 30.0 if perf_regress else 10.0, "noise_rel": 0.01,
             "floor_us": 4.0} for p in pts]
    runs = [{"kind": k, "tokens": 1024, "context": 32768, "greedy_agreement": 1.0, "sampling_agreement": 1.0,
             "max_kl": 1e-6, "max_logit_rel_err": 1e-3, "kernel_calls_on": 50, "kernel_calls_off": 0, "valid": True}
            for k in ("long_generation", "long_context", "sampling", "structured")]
    scope_numbers = {"compiles": [{"arch": "sm_90a", "tp": 8, "static": {}, "verdict": "OK", "message": ""}],
                     "dispatch": [{"case": "in", "expected_outcome": "kernel", "expected_reason": "in_scope",
                                   "got_outcome": "kernel", "got_reason": "in_scope"},
                                  {"case": "out", "expected_outcome": "fallback", "expected_reason": "batch",
                                   "got_outcome": "fallback", "got_reason": "batch"}]}
    perf_v = Verdict.PASS
    out = [isolation.run(ctx), static.run(ctx),
           GateResult("scope", scope.decide(scope_numbers, ["sm_90a"], [8])[0], [], scope_numbers),
           GateResult("numerics_unit", Verdict.PASS, [], {"samples": samples}),
           GateResult("numerics_model", Verdict.PASS, [], {"model_config": "k3-tp8-rank", "runs": runs}),
           GateResult("perf_sweep", perf_v, [], {"points": perf, "layer": {"on_us": 390.0, "off_us": 400.0, "noise_rel": 0.005},
                                                  "geomean_speedup": 2.0})]
    return [r for r in out if r.gate != skip]


def _gate(root, cid, **kw):
    results = _passing_results(root, cid, **kw)
    return ev.write(ev.build(root, OP, cid, results, 1, hardware={"gpu": "synthetic"}), root)


def test_promote_then_registry_then_demote(repo):
    root, cid = repo
    _gate(root, cid)
    res = promote(root, OP, cid)
    assert res.branch == f"promote/{OP}/{cid}"
    entries = read_manifest(root)
    assert entries == [{"op": OP, "candidate": cid, "scope": entries[0]["scope"]}]
    from gate_repo_helpers import git

    msg = git(root, "log", "-1", "--format=%B", res.branch)
    assert "perf_sweep: pass" in msg and "isolation: pass" in msg
    assert f"kernels_generated/{OP}/{cid}/kernel.py" in git(root, "ls-tree", "-r", "--name-only", res.branch)
    reg = Registry()
    assert reg.load_manifest(root / "kernels_generated" / "promoted.json") == 1
    (k,) = reg.entries(OP)
    assert k.candidate == cid and k.scope.batch == (1, 2) and k.scope.archs == ("sm_90a",)
    assert ci_verify(root, compile_archs=False) == []
    demote(root, OP)
    assert read_manifest(root) == []


def test_promote_refuses_stale_evidence_one_byte(repo):
    root, cid = repo
    _gate(root, cid)
    k = root / "kernels_generated" / OP / cid / "kernel.py"
    k.write_bytes(k.read_bytes().replace(b"32", b"64", 1))
    with pytest.raises(UserError):
        promote(root, OP, cid, commit=False)
    assert read_manifest(root) == []


def test_promote_refuses_changed_gate_config(repo):
    root, cid = repo
    _gate(root, cid)
    cfg = root / "gates" / "gate_config.toml"
    cfg.write_text(cfg.read_text().replace("value = 1.05", "value = 1.0"))
    problems = assess(root, OP, cid).problems
    assert any("gate_config hash differs" in p for p in problems)


@pytest.mark.parametrize("kw,needle", [({"skip": "perf_sweep"}, "gate perf_sweep: no evidence"),
                                       ({"perf_regress": True}, "perf_sweep numbers do not support a pass")])
def test_promote_refuses_missing_and_forged(repo, kw, needle):
    root, cid = repo
    _gate(root, cid, **kw)
    with pytest.raises(UserError):
        promote(root, OP, cid, commit=False)
    assert any(needle in p for p in assess(root, OP, cid).problems)


def test_promote_refuses_failed_gate(repo):
    root, cid = repo
    results = _passing_results(root, cid)
    results[3] = GateResult("numerics_unit", Verdict.FAIL, ["B=1: wrong"], {})
    ev.write(ev.build(root, OP, cid, results, 1, hardware={}), root)
    assert any("gate numerics_unit: fail" in p for p in assess(root, OP, cid).problems)


def test_edited_record_is_refused(repo):
    root, cid = repo
    path = _gate(root, cid)
    data = json.loads(path.read_text())
    data["gates"][5]["numbers"]["geomean_speedup"] = 9.0
    path.chmod(0o644)
    path.write_text(json.dumps(data))
    assert any("forged or corrupt" in p for p in assess(root, OP, cid).problems)


def test_ci_verify_catches_tampering_after_promotion(repo):
    root, cid = repo
    _gate(root, cid)
    promote(root, OP, cid, commit=False)
    assert ci_verify(root, compile_archs=False) == []
    k = root / "kernels_generated" / OP / cid / "kernel.py"
    k.write_text(k.read_text() + "\n")
    problems = ci_verify(root, compile_archs=False)
    assert problems and all(p.startswith(f"{OP}/{cid}:") for p in problems)


def test_not_run_is_never_a_pass(repo):
    root, cid = repo
    results = _passing_results(root, cid)
    results[5] = GateResult("perf_sweep", Verdict.NOT_RUN, ["needs a CUDA GPU"], {})
    ev.write(ev.build(root, OP, cid, results, 1, hardware={}), root)
    assert any("gate perf_sweep: not_run" in p for p in assess(root, OP, cid).problems)


def test_the_checkouts_promoted_kernels_verify():
    """What CI promotes from must stay valid: a change to a frozen path (gate code, gate config,
    harness/{compare,evidence,promotion}.py, a reference) makes every promoted kernel's evidence
    stale. Session 23 nearly landed such a change (a one-line check in promotion.py) unnoticed."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert ci_verify(root, compile_archs=False) == []


@pytest.mark.parametrize("model_config, accepted", [
    ("k3-tp8-rank", True), ("k3-tp8-rank:3", True),
    ("tiny", False), ("tiny:2", False), ("tiny-addnorm", False), ("no-such-config", False), (None, False)])
def test_a_numerics_model_pass_counts_only_on_a_k3_rank_config(model_config, accepted):
    """The judge looked for the exact string 'tiny': a smoke run recorded as 'tiny:2' or
    'tiny-addnorm' passed re-checking as if it had run the K3 rank model."""
    import json
    from pathlib import Path

    from gates import load_config
    from gates.suite import recheck
    from harness.toolchain import load_candidate

    root = Path(__file__).resolve().parents[2]
    cand = load_candidate("moe_router", "876e935cf35f")
    record = next(json.loads(p.read_text()) for p in sorted((cand.path / "evidence").glob("*.json"))
                  if any(g["gate"] == "numerics_model" for g in json.loads(p.read_text())["gates"]))
    numbers = dict(next(g for g in record["gates"] if g["gate"] == "numerics_model")["numbers"])
    numbers["model_config"] = model_config
    problems = recheck("numerics_model", numbers, "moe_router", cand.scope, load_config(root / "gates" / "gate_config.toml"))
    assert (problems == []) is accepted, problems


def _second_candidate(root, scope: dict, tag: str) -> str:
    """A committed, gated moe_router candidate of `scope` (what is there before is committed first:
    the isolation gate takes an uncommitted record of another candidate for a change outside it)."""
    from gate_repo_helpers import KERNEL_SRC, git, make_candidate

    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", "before")
    cid = make_candidate(root, KERNEL_SRC + f"\n# {tag}\n", scope)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"candidate {tag}")
    _gate(root, cid)
    return cid


def test_a_narrow_promotion_keeps_the_broad_kernel_and_demote_removes_one(repo):
    """An op holds a broad kernel and a narrower one; promoting one of the same scope replaces
    only that one; `demote --candidate` removes one entry, `demote` every entry of the op."""
    from gate_repo_helpers import NARROW_SCOPE

    root, narrow = repo
    _gate(root, narrow)
    broad = _second_candidate(root, {**NARROW_SCOPE, "batch": [1, 4]}, "broad")
    from gate_repo_helpers import git

    promote(root, OP, broad, commit=False)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "promote broad")             # landed: the narrow one is the next change
    promote(root, OP, narrow, commit=False)
    assert [e["candidate"] for e in read_manifest(root)] == [broad, narrow]
    reg = Registry()
    reg.load_manifest(root / "kernels_generated" / "promoted.json")
    assert [(e.candidate, e.scope.batch) for e in reg.entries(OP)] == [(narrow, (1, 2)), (broad, (1, 4))]
    assert ci_verify(root, compile_archs=False) == []

    same = _second_candidate(root, NARROW_SCOPE, "same scope as narrow")
    promote(root, OP, same, commit=False)
    assert [e["candidate"] for e in read_manifest(root)] == [broad, same]
    with pytest.raises(UserError, match=f"{OP}/{narrow} is not promoted"):
        demote(root, OP, commit=False, candidate=narrow)
    res = demote(root, OP, candidate=same)
    assert [e["candidate"] for e in read_manifest(root)] == [broad]
    assert f"{OP} keeps {broad}" in git(root, "log", "-1", "--format=%B", res.branch)
    promote(root, OP, same, commit=False)
    assert demote(root, OP, commit=False).candidate_id == f"{broad},{same}"
    assert read_manifest(root) == []


def test_ci_verify_flags_two_entries_of_one_scope(repo):
    root, cid = repo
    _gate(root, cid)
    promote(root, OP, cid, commit=False)
    (entry,) = read_manifest(root)
    (root / "kernels_generated" / "promoted.json").write_text(json.dumps([entry, {**entry, "candidate": "0" * 12}]))
    assert any(f"{OP}/{cid} and {'0' * 12} declare the same scope" in p for p in ci_verify(root, compile_archs=False))
    (root / "kernels_generated" / "promoted.json").write_text(json.dumps([entry, entry]))
    assert any(f"{OP}/{cid} appears twice" in p for p in ci_verify(root, compile_archs=False))


def test_primary_entries_and_promoted_ids_order_by_scope():
    from harness.promotion import primary_entries, promoted_ids

    broad = {"op": OP, "candidate": "b", "scope": {"archs": ["sm_90a"], "tp": [8, 16], "batch": [1, 64]}}
    narrow = {"op": OP, "candidate": "n", "scope": {"archs": ["sm_90a"], "tp": [8], "batch": [1, 8]}}
    other = {"op": "attn_res", "candidate": "a", "scope": {"archs": ["sm_90a"], "tp": [8], "batch": [1, 64]}}
    for entries in ([broad, narrow, other], [narrow, broad, other]):
        assert primary_entries(entries) == {OP: broad, "attn_res": other}
        assert promoted_ids(entries) == {OP: "n,b", "attn_res": "a"}
