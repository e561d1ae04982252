import json

import pytest

from harness.errors import UserError
from harness.toolchain import (Provenance, Scope, candidate_id, create_candidate, list_candidates, load_candidate,
                               scan_candidates)

SRC = "def compile(tp, options, **static):\n    return None\n"


def test_create_load_roundtrip_and_content_id(tmp_path):
    scope = Scope(tp=(8,), batch=(1, 8))
    c = create_candidate("moe_router", SRC, scope, Provenance("llm:openai/gpt-x", prompt_hash="ab"), root=tmp_path)
    assert c.path.name == c.id == candidate_id(SRC, scope)
    assert c.path.parent == tmp_path / "moe_router"
    again = load_candidate("moe_router", c.path)
    assert again.scope == scope and again.provenance.author == "llm:openai/gpt-x"
    assert again.provenance.created_utc          # filled on creation
    # same content -> same folder (idempotent); another scope -> another id
    assert create_candidate("moe_router", SRC, scope, Provenance(), root=tmp_path).path == c.path
    assert candidate_id(SRC, Scope(tp=(16,))) != c.id
    assert candidate_id(SRC + "\n", scope) != c.id


def test_a_new_candidate_folder_takes_the_umask_not_0700(tmp_path):
    """Drafts were created by tempfile.mkdtemp and renamed into place, so their folders came out
    drwx------ (the router candidate 1c5dd5 in session 42): unreadable to the group that reviews them."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        c = create_candidate("moe_router", SRC, Scope(tp=(8,)), Provenance(), root=tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(c.path.stat().st_mode) == 0o755
    assert [p.name for p in c.path.parent.iterdir()] == [c.id]      # no temporary folder left behind


def test_tampered_kernel_is_refused(tmp_path):
    c = create_candidate("moe_router", SRC, Scope(), Provenance(), root=tmp_path)
    (c.path / "kernel.py").write_text(SRC + "# edited\n")
    with pytest.raises(UserError, match="does not match its content"):
        load_candidate("moe_router", c.path)


@pytest.mark.parametrize("mutate, message", [
    (lambda m: m.pop("scope"), "missing key 'scope'"),
    (lambda m: m.update(op="rmsnorm"), "declares op"),
    (lambda m: m["scope"].update(archs=["sm_75"]), "scope archs"),
    (lambda m: m["scope"].update(batch=[0, 64]), "scope batch"),
    (lambda m: m["provenance"].update(author="someone"), "provenance author"),
])
def test_malformed_candidate_json_is_a_user_error(tmp_path, mutate, message):
    c = create_candidate("moe_router", SRC, Scope(), Provenance(), root=tmp_path)
    meta = json.loads((c.path / "candidate.json").read_text())
    mutate(meta)
    (c.path / "candidate.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=message):
        load_candidate("moe_router", c.path)


def test_missing_files_and_unknown_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    (tmp_path / "kernels_generated" / "moe_router" / "abc").mkdir(parents=True)
    with pytest.raises(UserError, match="no kernel.py"):
        load_candidate("moe_router", "abc")
    with pytest.raises(UserError, match="not found"):
        load_candidate("moe_router", "zzz")
    with pytest.raises(UserError, match="unknown op"):
        load_candidate("no_such_op", "abc")


def test_a_missing_folder_path_or_a_glob_is_not_found_not_a_traceback(tmp_path, monkeypatch):
    """An absolute path that does not exist used to reach pathlib's glob, which raises
    NotImplementedError for absolute patterns (`harness check moe_router /tmp/x`); glob
    characters in an id are literal."""
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    (tmp_path / "kernels_generated" / "moe_router" / "abc").mkdir(parents=True)
    for ref in (tmp_path / "nowhere", str(tmp_path / "nowhere"), "a*", "[a]bc", "?bc"):
        with pytest.raises(UserError, match="not found"):
            load_candidate("moe_router", ref)
    with pytest.raises(UserError, match="no kernel.py"):        # a unique literal prefix still resolves
        load_candidate("moe_router", "ab")


def test_list_candidates_skips_malformed_and_scan_names_them(tmp_path):
    good = create_candidate("moe_router", SRC, Scope(), Provenance(), root=tmp_path)
    (tmp_path / "moe_router" / "broken").mkdir()
    (tmp_path / "moe_router" / "__pycache__").mkdir()            # not a candidate: neither listed nor unreadable
    (tmp_path / "moe_router" / ".tmp.write").mkdir()              # an in-flight create_candidate
    assert [c.id for c in list_candidates("moe_router", root=tmp_path)] == [good.id]
    scan = scan_candidates("moe_router", root=tmp_path)
    assert [c.id for c in scan.candidates] == [good.id]
    assert [(p.name, "no kernel.py" in why) for p, why in scan.unreadable] == [("broken", True)]


@pytest.mark.parametrize("ref", ["", "  "])
def test_an_empty_id_is_a_user_error_not_the_current_folder(tmp_path, monkeypatch, ref):
    """Path("") is the current folder: an empty id used to load whatever folder the caller ran in."""
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path))
    c = create_candidate("moe_router", SRC, Scope(), Provenance(), root=tmp_path / "kernels_generated")
    monkeypatch.chdir(c.path)                                    # a loadable candidate folder
    with pytest.raises(UserError, match="empty candidate id"):
        load_candidate("moe_router", ref)


def test_committed_moe_router_candidate_loads():
    cands = list_candidates("moe_router")
    assert cands, "the hand-written moe_router candidate is missing"
    assert all(c.provenance.author for c in cands)


def test_scope_contains_a_point_by_batch_tp_state_dtype_and_shape():
    from harness.opdef import Point

    s = Scope(tp=(8,), batch=(1, 8), state_dtypes=("fp32",))
    assert s.contains(Point(batch=8, tp=8))
    assert not s.contains(Point(batch=9, tp=8))
    assert not s.contains(Point(batch=1, tp=16))
    assert not s.contains(Point(batch=1, tp=8, state_dtype="bf16"))
    assert Scope().contains(Point(batch=1, tp=8, state_dtype="bf16"))      # no state dtypes named: any
    shaped = Scope(shapes=("latent_down", "latent_up"))
    assert shaped.contains(Point(batch=1, tp=8, shape="latent_up"))
    assert not shaped.contains(Point(batch=1, tp=8, shape="mla_qkv_a"))
    assert not Scope().contains(Point(batch=1, tp=8, shape="latent_up"))  # no shapes named: the default only
