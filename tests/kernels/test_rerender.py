"""Every committed candidate rendered from a kernel family (human or template author, the
promoted kernels among them) re-renders byte-identically from its recorded params: a template
edit that changes an existing point's kernel.py fails here, for every op."""
from __future__ import annotations

import json

import pytest

from kernel_helpers import ROOT

CANDIDATES = ROOT / "kernels_generated"


def _templated() -> list[tuple[str, str]]:
    """(op, id) of every candidate folder whose provenance names a family."""
    out = []
    for meta in sorted(CANDIDATES.glob("*/*/candidate.json")):
        if json.loads(meta.read_text())["provenance"].get("template"):
            out.append((meta.parent.parent.name, meta.parent.name))
    return out


def _rerender(op: str, cid: str) -> tuple[bytes, bytes]:
    from harness.agent.families import load_family

    folder = CANDIDATES / op / cid
    tpl = json.loads((folder / "candidate.json").read_text())["provenance"]["template"]
    fam = load_family(ROOT / "prompts/kernels" / op / f"{tpl['family']}.py.j2", op)
    return fam.render(tpl["params"]).encode(), (folder / "kernel.py").read_bytes()


def test_promoted_kernels_are_templated_and_rerender_byte_identically():
    promoted = [(e["op"], e["candidate"]) for e in json.loads((CANDIDATES / "promoted.json").read_text())]
    assert promoted and set(promoted) <= set(_templated())
    for op, cid in promoted:
        new, old = _rerender(op, cid)
        assert new == old, (op, cid)


@pytest.mark.parametrize("op,cid", _templated())
def test_templated_candidates_rerender_byte_identically(op, cid):
    new, old = _rerender(op, cid)
    assert new == old
