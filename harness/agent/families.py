"""Kernel families: jinja2 kernel templates with a declared parameter space.

Contract (docs/ARCHITECTURE.md, "Kernel families"):
    prompts/kernels/<op>/<family>.py.j2       the kernel.py template; parameters are jinja variables
    prompts/kernels/<op>/<family>.space.json  {"params": {name: [values, ...]},     ordered: neighbours are adjacent
                                               "constraints": ["jinja expr", ...],  all must be true
                                               "default": {name: value},            optional start point
                                               "scope": {...},                      optional narrower scope
                                               "doc": "one line"}
Rendering is sandboxed jinja2 with StrictUndefined: a template that names a parameter the
space does not declare fails loudly instead of rendering an empty string.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import UserError

Params = dict[str, Any]


ENUMERATE_MAX = 20_000                   # spaces up to this size are enumerated; larger ones are sampled
SHARED_PARTIALS = "_shared"              # prompts/kernels/_shared/: partials of families of several ops


def _env(folder: Path):
    """Sandboxed, strict; `{% include "_part.j2" %}` reads a partial from the family's own
    folder (code shared by families of one op), else from prompts/kernels/_shared/ (code shared
    by families of several ops, e.g. the swap-AB GEMM of skinny_gemm and gemm_situ_and_mul);
    nothing else."""
    from jinja2 import FileSystemLoader, StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True,
                                trim_blocks=False, lstrip_blocks=False,
                                loader=FileSystemLoader([str(folder), str(folder.parent / SHARED_PARTIALS)]))


def params_key(family: str, params: Params) -> str:
    """Stable identity of one configuration."""
    return family + ":" + json.dumps(params, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Family:
    op: str
    name: str
    template_path: Path
    params: dict[str, list]
    constraints: tuple[str, ...] = ()
    default: Params = field(default_factory=dict)
    scope: dict[str, Any] = field(default_factory=dict)
    doc: str = ""

    @cached_property
    def _checks(self):
        env = _env(self.template_path.parent)
        return [env.compile_expression(c, undefined_to_none=False) for c in self.constraints]

    def complete(self, params: Params) -> Params:
        """`params` with every knob it lacks taken from the space's default: a knob added to a
        family later (its default renders the code as before) leaves the points recorded before it
        (human candidates, agent history) valid and rendering byte-identically."""
        missing = self.default.keys() - params.keys()
        if not missing:                      # the common case (configs() builds full points): no copy
            return params
        return {**{k: self.default[k] for k in missing}, **params}

    def feasible(self, params: Params) -> bool:
        params = self.complete(params)
        if set(params) != set(self.params) or any(params[k] not in v for k, v in self.params.items()):
            return False
        try:
            return all(bool(chk(**params)) for chk in self._checks)
        except Exception:   # a constraint that cannot be evaluated rules the point out
            return False

    def size(self) -> int:
        """Points in the product of the value lists (feasible or not): what configs() walks."""
        return math.prod(len(v) for v in self.params.values())

    def iter_configs(self) -> Iterator[Params]:
        """Every feasible configuration, in declaration order, one at a time."""
        names = list(self.params)
        for values in itertools.product(*(self.params[n] for n in names)):
            p = dict(zip(names, values))
            if self.feasible(p):
                yield p

    def configs(self) -> list[Params]:
        """Every feasible configuration, in declaration order (walks the whole product: size())."""
        return list(self.iter_configs())

    def sample(self, rng: random.Random) -> Params | None:
        """One uniformly drawn point of the product, or None where it is infeasible: the search's
        way into spaces too large to enumerate."""
        p = {n: rng.choice(v) for n, v in self.params.items()}
        return p if self.feasible(p) else None

    def neighbours(self, params: Params) -> list[Params]:
        """Feasible configurations one step away along one parameter's ordered list."""
        params = self.complete(params)
        out = []
        for name, values in self.params.items():
            i = values.index(params[name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    q = dict(params, **{name: values[j]})
                    if self.feasible(q):
                        out.append(q)
        return out

    def start(self) -> Params | None:
        """The declared default if feasible, else the middle feasible point (a space too large to
        enumerate: the first feasible one)."""
        if self.default and self.feasible(self.default):
            return dict(self.default)
        if self.size() > ENUMERATE_MAX:
            return next(self.iter_configs(), None)
        cfgs = self.configs()
        return cfgs[len(cfgs) // 2] if cfgs else None

    def render(self, params: Params, check_space: bool = True) -> str:
        """The template rendered at `params`. check_space=False renders a point the declared space
        does not list (a study, e.g. scripts/render_variant.py --outside-space); the template's own
        asserts still judge it when the kernel is imported."""
        if check_space and not self.feasible(params):
            raise ValueError(f"{self.name}: {params} is not in the declared space")
        params = self.complete(params)
        tpl = _env(self.template_path.parent).from_string(self.template_path.read_text())
        return tpl.render(**params, params=dict(params), family=self.name, op=self.op)


def point_scope(family_scope: dict, pt: dict) -> dict:
    """A human point's scope (prompts/kernels/human_candidates.json): the family's scope with the
    point's "scope" overrides; each must narrow it (a batch range inside the family's, a list a
    subset of its list). ValueError otherwise."""
    scope = dict(family_scope)
    for key, val in pt.get("scope", {}).items():
        if key not in family_scope:
            raise ValueError(f"{pt['op']} {pt['label']}: scope key '{key}' is not in the family's scope")
        wide = family_scope[key]
        if key == "batch":
            ok = len(val) == 2 and wide[0] <= val[0] <= val[1] <= wide[1]
        else:
            ok = bool(val) and set(val) <= set(wide)
        if not ok:
            raise ValueError(f"{pt['op']} {pt['label']}: scope {key}={val} does not narrow the family's {wide}")
        scope[key] = list(val)
    return scope


def load_family(template_path: Path, op: str) -> Family:
    name = template_path.name[: -len(".py.j2")]
    space_path = template_path.with_name(f"{name}.space.json")
    if not space_path.is_file():
        raise UserError(f"kernel family {template_path}: no {space_path.name} beside it")
    try:
        space = json.loads(space_path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{space_path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    params = space.get("params")
    if not isinstance(params, dict) or not params or not all(isinstance(v, list) and v for v in params.values()):
        raise UserError(f"{space_path}: 'params' must map each name to a non-empty list of values")
    return Family(op=op, name=name, template_path=template_path, params=params,
                  constraints=tuple(space.get("constraints", ())), default=dict(space.get("default", {})),
                  scope=dict(space.get("scope", {})), doc=str(space.get("doc", "")))


def load_families(op: str, prompts_root: Path) -> list[Family]:
    """Every family of `op` under prompts_root/kernels/<op>/ (sorted by name)."""
    folder = prompts_root / "kernels" / op
    if not folder.is_dir():
        return []
    return [load_family(p, op) for p in sorted(folder.glob("*.py.j2"))]
