"""Render the human-chosen family points (human_candidates.json) into candidate folders.

    python prompts/kernels/render_human.py [--op moe_router]

Each point becomes kernels_generated/<op>/<id>/ with provenance author "human" and
template {"family", "params"}; prints "<op> <label> <id>" per candidate. Idempotent.

A point may carry "scope": keys of the family's scope replaced for this candidate, only to
narrow it (e.g. the GEMM shapes and batches where a skinny GEMM beats cuBLAS): the same
kernel with another scope is another candidate (the id hashes source and scope).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.agent.families import point_scope  # noqa: F401 - the scope check, also called as render_human.point_scope

HERE = Path(__file__).resolve().parent


def human_points(op: str | None = None) -> list[dict]:
    pts = json.loads((HERE / "human_candidates.json").read_text())["candidates"]
    return [p for p in pts if op is None or p["op"] == op]


def render_point(pt: dict):
    """Render one point and create (or reuse) its candidate folder; returns the Candidate."""
    from harness.agent.families import load_family
    from harness.toolchain.candidate import Provenance, Scope, create_candidate

    fam = load_family(HERE / pt["op"] / f"{pt['family']}.py.j2", pt["op"])
    source = fam.render(pt["params"])
    scope = Scope.from_json(point_scope(fam.scope, pt))
    prov = Provenance(author="human", template={"family": fam.name, "params": dict(pt["params"])})
    return create_candidate(pt["op"], source, scope, prov)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default=None)
    args = ap.parse_args()
    for pt in human_points(args.op):
        cand = render_point(pt)
        print(pt["op"], pt["label"], cand.id)


if __name__ == "__main__":
    main()
