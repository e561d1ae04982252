"""Render a variant of a templated candidate, some of its family params changed, as a scratch
candidate for a GPU bench (CPU only: renders and writes the folder, compiles nothing).

    python scripts/render_variant.py kda_decode 8d9661 --set mid_v_split=2 --set mid_min_ctas=3
    python scripts/render_variant.py kda_decode 8d9661 --set mid_v_split=2 --out /tmp/scratch --json
    python scripts/render_variant.py attn_res 6f6818 --set small_cs=14 --set small_threads=64 \
        --outside-space --out /tmp/scratch
    python scripts/render_variant.py skinny_gemm 268009 --scope 'shapes=["mla_g_proj","kda_o_proj"]'

The base is a committed candidate rendered from a template family (its provenance names the
family and params). Each --set KEY=VALUE replaces one param: VALUE is read as JSON (2, true,
"mla_qkv_a"), else kept as a string. The variant must lie in the family's declared space, unless
--outside-space: then only the params' names are checked (a study of a value the space does not
list yet, e.g. session 40's 14-CTA attn_res clusters; the template's own asserts still apply when
the kernel is imported). It is written as kernels_generated/<op>/<id>/ (or under --out), with
human provenance and the base's scope, or that scope with the keys each --scope KEY=VALUE replaces
(within the family's scope: e.g. the same GEMM kernel at other named shapes). Its id hashes the source and scope, so rendering the same
variant twice gives the same folder. Prints the id.

Use: candidates that only a GPU can judge, for one bench, without committing them (committed
human candidates must meet tests/kernels' bars, e.g. no register spills). An untracked folder
travels with a device call (scripts/gpu/slim_tree.sh on leaves untracked files outside the paths
it slims). Sessions 18 and 19 did this by hand.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_sets(pairs: list[str]) -> dict:
    """["a=2", "b=true", "c=x"] -> {"a": 2, "b": True, "c": "x"}."""
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got '{pair}'")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def variant_scope(op: str, base_scope: dict, family_scope: dict, scope_sets: dict) -> dict:
    """The base's scope with scope_sets' keys replaced; each new value must lie within the family's
    scope (a batch range inside its range, a list a subset of its list): the check of the scopes of
    human points (families.point_scope), so a variant may declare any scope a committed point could."""
    from harness.agent.families import point_scope

    for key, val in scope_sets.items():
        if not isinstance(val, list):
            raise ValueError(f"--scope {key} wants a JSON list, e.g. shapes=[\"mla_g_proj\"] or batch=[1,8]; got {val!r}")
    within = point_scope(family_scope, {"op": op, "label": "variant", "scope": scope_sets})
    return {**base_scope, **{key: within[key] for key in scope_sets}}


def render_variant(op: str, base: str, sets: dict, root: Path | None = None, outside_space: bool = False,
                   scope_sets: dict | None = None):
    """The variant's Candidate (written under root/<op>/, default kernels_generated/). With
    outside_space the point need not lie in the family's declared space; scope_sets replaces keys
    of the base's scope (within the family's), e.g. {"shapes": ["mla_g_proj"]}."""
    from harness.agent.families import load_family
    from harness.toolchain.candidate import Provenance, Scope, create_candidate, list_candidates

    matches = [c for c in list_candidates(op) if c.id.startswith(base)]
    if len(matches) != 1:
        raise ValueError(f"{op}: '{base}' names {len(matches)} candidates, not one")
    cand = matches[0]
    tmpl = cand.provenance.template
    if not tmpl:
        raise ValueError(f"{op}/{cand.id} was not rendered from a template family: no params to change")
    fam = load_family(ROOT / "prompts/kernels" / op / f"{tmpl['family']}.py.j2", op)
    params = fam.complete(dict(tmpl["params"]))
    unknown = sorted(set(sets) - set(fam.params))
    if unknown:
        raise ValueError(f"{fam.name}: no param {', '.join(unknown)} (params: {', '.join(sorted(fam.params))})")
    params.update(sets)
    source = fam.render(params, check_space=not outside_space)   # ValueError when outside the space
    prov = Provenance(author="human", parent=cand.id, template={"family": fam.name, "params": params})
    scope = variant_scope(op, cand.scope.to_json(), fam.scope, scope_sets or {})
    return create_candidate(op, source, Scope.from_json(scope), prov, root=root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("op")
    ap.add_argument("base", help="id (or prefix) of a committed templated candidate")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--scope", dest="scope_sets", action="append", default=[], metavar="KEY=VALUE",
                    help="replace a key of the base's scope, within the family's (VALUE as JSON, e.g. "
                         "'shapes=[\"mla_g_proj\"]' or 'batch=[1,8]')")
    ap.add_argument("--out", type=Path, default=None, help="root for <op>/<id>/ (default: kernels_generated)")
    ap.add_argument("--outside-space", action="store_true",
                    help="render a point the family's space does not list (a study; never a committed candidate)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from harness.errors import UserError

    try:
        cand = render_variant(a.op, a.base, parse_sets(a.sets), a.out, a.outside_space, parse_sets(a.scope_sets))
    except (ValueError, UserError) as e:
        print(f"render_variant: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps({"op": a.op, "id": cand.id, "path": str(cand.path),
                          "params": cand.provenance.template["params"]}))
    else:
        print(cand.id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
