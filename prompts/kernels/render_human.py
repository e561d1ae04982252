"""Render the human-chosen family points (human_candidates.json) into candidate folders.

    python prompts/kernels/render_human.py [--op moe_router]

Each point becomes kernels_generated/<op>/<id>/ with provenance author "human" and
template {"family", "params"}; prints "<op> <label> <id>" per candidate. Idempotent.

A point may carry "scope": keys of the family's scope replaced for this candidate, only to
narrow it (e.g. the GEMM shapes and batches where a skinny GEMM beats cuBLAS): the same
kernel with another scope is another candidate (the id hashes source and scope).

A folder that already exists is reused as it is. When it is not committed and its provenance is
not the point's (a scratch render of scripts/render_variant.py names its base as parent: session 56
nearly committed 12ecfe that way), a warning on stderr says so: delete the folder and run again to
record the point's own. A committed folder keeps the provenance it was committed with (268009 and
7b9dd5 name their bases), so it is not warned about.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
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
    cand = create_candidate(pt["op"], source, scope, prov)
    why = provenance_mismatch(cand.provenance, prov)
    if why and not committed(cand.path):
        print(f"render_human: {pt['op']} {pt['label']}: reused {cand.path}, whose provenance is not the "
              f"point's ({why}); a scratch render? delete the folder and run again", file=sys.stderr)
    return cand


def committed(folder: Path) -> bool:
    """Whether git tracks the folder's candidate.json (False outside a checkout or without git)."""
    try:
        res = subprocess.run(["git", "-C", str(folder), "ls-files", "--error-unmatch", "candidate.json"],
                             capture_output=True, check=False)
    except OSError:
        return False
    return res.returncode == 0


def provenance_mismatch(found, wanted) -> str | None:
    """How a reused folder's provenance differs from the point's (author, parent, template), or
    None; created_utc is not compared (every render stamps its own)."""
    diffs = [f"{key} {getattr(found, key)!r}, not {getattr(wanted, key)!r}"
             for key in ("author", "parent", "template") if getattr(found, key) != getattr(wanted, key)]
    return "; ".join(diffs) or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default=None)
    args = ap.parse_args()
    for pt in human_points(args.op):
        cand = render_point(pt)
        print(pt["op"], pt["label"], cand.id)


if __name__ == "__main__":
    main()
