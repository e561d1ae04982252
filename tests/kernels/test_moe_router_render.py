"""Every committed moe_router candidate rendered from a family (the promoted 7cda33699a87
among them) re-renders byte-identically from its recorded params: a template edit that
changes an existing point's kernel.py fails here."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT

PROMOTED_ID = "7cda33699a87"
CAND_ROOT = ROOT / "kernels_generated" / "moe_router"


def _templated() -> list[str]:
    out = []
    for d in sorted(CAND_ROOT.iterdir()):
        meta = d / "candidate.json"
        if meta.is_file() and (json.loads(meta.read_text())["provenance"].get("template") or None):
            out.append(d.name)
    return out


def _rerender(cid: str) -> tuple[bytes, bytes]:
    from harness.agent.families import load_family

    folder = CAND_ROOT / cid
    tpl = json.loads((folder / "candidate.json").read_text())["provenance"]["template"]
    fam = load_family(ROOT / "prompts/kernels/moe_router" / f"{tpl['family']}.py.j2", "moe_router")
    return fam.render(tpl["params"]).encode(), (folder / "kernel.py").read_bytes()


def test_promoted_kernel_rerenders_byte_identically():
    assert PROMOTED_ID in _templated()
    new, old = _rerender(PROMOTED_ID)
    assert new == old


@pytest.mark.parametrize("cid", _templated())
def test_templated_candidates_rerender_byte_identically(cid):
    new, old = _rerender(cid)
    assert new == old
