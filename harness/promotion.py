"""Promotion: the only way a kernel enters kernels_generated/promoted.json.

`assess` collects a candidate's evidence records and checks that, for every gate, the latest
record whose hashes match the files on disk says PASS and that its numbers support that
verdict under the frozen config (a forged PASS does not survive `gates.suite.recheck`).
`promote` refuses on any problem; else it writes the manifest entry {op, candidate, scope}
and commits it, with the candidate folder and its evidence, on branch promote/<op>/<id>.
An op may hold several entries with different scopes (a narrow kernel beside a broad one;
the registry runs the most specific entry covering a call): a promotion replaces the op's
entry of the same scope and keeps the others; `demote` removes one entry or all of an op's.
`ci_verify` / `ci_promote` are the CI side.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gates import ALL_GATES, GateContext, GateName, Verdict
from gates.config import GateConfig, config_path

from . import evidence as ev
from .errors import UserError

MANIFEST_REL = "kernels_generated/promoted.json"


class PromotionRefused(UserError):
    def __init__(self, op: str, candidate: str, problems: list[str]):
        self.problems = problems
        super().__init__(f"refusing to promote {op}/{candidate}: {problems[0]}"
                         + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""))


@dataclass
class Assessment:
    op: str
    candidate_id: str
    problems: list[str] = field(default_factory=list)
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)   # gate -> {verdict, record}
    scope: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def gate_config(root: Path) -> GateConfig:
    """The gate config the root pins; UserError (one line) when it is missing or malformed."""
    path = config_path(root)
    try:
        return GateConfig.from_bytes(path.read_bytes())
    except OSError as exc:
        raise UserError(f"cannot read the gate config {path}: {exc.strerror or exc}") from None
    except ValueError as exc:                       # TOMLDecodeError, UnicodeDecodeError, schema errors
        raise UserError(f"gate config {path} is malformed: {exc}") from None


def _git(root: Path):
    from gates._git import Git, GitError

    try:
        return Git(root)
    except GitError:
        return None


def assess(root: Path, op: str, candidate_id: str) -> Assessment:
    from .toolchain.candidate import load_candidate
    from gates.suite import recheck

    a = Assessment(op, candidate_id)
    cdir = root / "kernels_generated" / op / candidate_id
    try:
        cand = load_candidate(op, cdir)
    except UserError as exc:
        a.problems.append(f"candidate: {exc}")
        return a
    a.scope = cand.scope.to_json()
    config = gate_config(root)
    now = ev.current_pins(root, op, candidate_id)
    git = _git(root)
    usable: list[tuple[Path, ev.EvidenceRecord, set[str]]] = []   # (path, record, its gates that stand)
    stale: dict[str, list[str]] = {}       # gate -> why the newest record of it no longer stands
    for path, rec in ev.records(root, op, candidate_id):     # oldest first: a later record overwrites
        if isinstance(rec, ev.EvidenceError):
            a.problems.append(f"evidence {path.name}: forged or corrupt: {rec}")
            continue
        if (rec.op, rec.candidate_id) != (op, candidate_id):
            a.problems.append(f"evidence {path.name}: names {rec.op}/{rec.candidate_id}, not this candidate")
            continue
        if git is not None:
            a.problems += [f"evidence {path.name}: {p}" for p in _git_history_problems(git, root, path)]
        reasons = ev.stale_reasons(rec, now)
        stale.update({g: why for g, why in reasons.items() if why})
        standing = {g for g, why in reasons.items() if not why}
        if standing:
            usable.append((path, rec, standing))
    usable.sort(key=lambda prs: prs[1].created_utc)
    for gate in ALL_GATES:
        latest = None
        for path, rec, standing in usable:
            gr = rec.gate(gate.value)
            if gr is not None and gate.value in standing:
                latest = (path, gr)
        if latest is None:
            why = f"evidence is stale: {stale[gate.value][0]}" if gate.value in stale else "no evidence"
            a.problems.append(f"gate {gate.value}: {why} (run `harness gate {op} {candidate_id} --only {gate.value}`)")
            continue
        path, gr = latest
        a.gates[gate.value] = {"verdict": gr.verdict, "record": path.name, "reasons": gr.reasons[:3]}
        if gr.verdict != Verdict.PASS.value:
            a.problems.append(f"gate {gate.value}: {gr.verdict}" + (f": {gr.reasons[0]}" if gr.reasons else ""))
            continue
        a.problems += [f"evidence {path.name}: {p}" for p in recheck(gate.value, gr.numbers, op, cand.scope, config)]
    return a


def _git_history_problems(git, root: Path, path: Path) -> list[str]:
    """A committed record must be committed once and match its committed bytes."""
    rel = path.relative_to(root).as_posix()
    try:
        commits = [c for c in git.run("log", "--format=%H", "--", rel).splitlines() if c]
        if not commits:
            return []
        problems = []
        if len(commits) > 1:
            problems.append(f"modified after it was committed ({len(commits)} commits touch it)")
        if git.run("diff", "--name-only", "HEAD", "--", rel):
            problems.append("differs from its committed version")
        return problems
    except Exception as exc:  # noqa: BLE001 - git trouble is reported, never hidden
        return [f"git history unreadable: {exc}"]


# ---- the manifest ----------------------------------------------------------------------------
def read_manifest(root: Path) -> list[dict[str, Any]]:
    p = root / MANIFEST_REL
    if not p.is_file():
        return []
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{MANIFEST_REL}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and {"op", "candidate", "scope"} <= set(e) for e in data):
        raise UserError(f"{MANIFEST_REL}: must be a list of {{op, candidate, scope}}")
    return data


def manifest_bytes(entries: list[dict[str, Any]]) -> bytes:
    return (json.dumps(sorted(entries, key=lambda e: e["op"]), indent=2) + "\n").encode()


def kernel_entries(entries: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per op, its manifest entries as registry.KernelEntry in the order a call tries them
    (`registry.by_specificity`: the most specific first, the broadest last)."""
    from .registry import KernelEntry, KernelScope, by_specificity

    by_op: dict[str, list[KernelEntry]] = {}
    for e in entries:
        by_op.setdefault(e["op"], []).append(KernelEntry(e["op"], e["candidate"], KernelScope.from_json(e["scope"])))
    return {op: by_specificity(ks) for op, ks in by_op.items()}


def promoted_ids(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Per op, its promoted candidate ids joined by "," in the order a call tries them (the most
    specific first): the form bench_layers.py records as "promoted", so the two compare."""
    return {op: ",".join(k.candidate for k in ks) for op, ks in kernel_entries(entries).items()}


def primary_entries(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per op, its broadest entry (the kernel that runs wherever no narrower one does): what the
    scorecard, the dashboard's incumbent and the agent's search compare against."""
    broadest = {ks[-1].candidate for ks in kernel_entries(entries).values()}
    return {e["op"]: e for e in entries if e["candidate"] in broadest}


def _write_manifest(root: Path, data: bytes) -> None:
    p = root / MANIFEST_REL
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".promoted.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


@dataclass
class PromotionResult:
    op: str
    candidate_id: str
    action: str                      # promote | demote
    branch: str = ""
    commit: str = ""
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)


def promote(root: Path, op: str, candidate_id: str, commit: bool = True) -> PromotionResult:
    a = assess(root, op, candidate_id)
    if a.problems:
        raise PromotionRefused(op, candidate_id, a.problems)
    entries = [e for e in read_manifest(root)
               if e["op"] != op or (e["scope"] != a.scope and e["candidate"] != candidate_id)]
    entries.append({"op": op, "candidate": candidate_id, "scope": a.scope})
    data = manifest_bytes(entries)
    res = PromotionResult(op, candidate_id, "promote", gates=a.gates)
    # commit first (the working tree stays untouched), so a failed commit leaves the manifest as it was
    if commit:
        cdir = root / "kernels_generated" / op / candidate_id
        files = {MANIFEST_REL: data}
        for f in sorted(cdir.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and not f.name.startswith("."):
                files[f.relative_to(root).as_posix()] = f.read_bytes()
        lines = [f"{g}: {info['verdict']} ({info['record']})" for g, info in a.gates.items()]
        msg = f"promote {op}/{candidate_id}\n\nFast-track gates:\n" + "\n".join(lines) + "\n"
        res.branch = f"promote/{op}/{candidate_id}"
        res.commit = _commit(root, res.branch, files, msg)
    _write_manifest(root, data)
    return res


def demote(root: Path, op: str, commit: bool = True, candidate: str | None = None) -> PromotionResult:
    """Remove op's promoted entry of `candidate`, or every entry of op when None."""
    entries = read_manifest(root)
    hit = [e for e in entries if e["op"] == op and candidate in (None, e["candidate"])]
    if not hit:
        promoted = [e["candidate"] for e in entries if e["op"] == op]
        raise UserError(f"{op} has no promoted kernel" if not promoted else
                        f"{op}/{candidate} is not promoted (promoted: {', '.join(promoted)})")
    rest = [e for e in entries if e not in hit]
    data = manifest_bytes(rest)
    ids = ",".join(e["candidate"] for e in hit)
    res = PromotionResult(op, ids, "demote")
    left = [e["candidate"] for e in rest if e["op"] == op]
    after = (f"{op} keeps {', '.join(left)} where its scope covers a call, the reference elsewhere" if left
             else f"The decode path falls back to the reference for {op}")
    if commit:                   # first, as in promote: a failed commit leaves the manifest as it was
        res.branch = f"demote/{op}/{hit[0]['candidate']}"
        res.commit = _commit(root, res.branch, {MANIFEST_REL: data}, f"demote {op}/{ids}\n\n{after}.\n")
    _write_manifest(root, data)
    return res


def _commit(root: Path, branch: str, files: dict[str, bytes], message: str) -> str:
    from gates._git import Git, GitError

    try:
        return Git(root).commit_files_on_branch(branch, files, message)
    except GitError as exc:
        raise UserError(f"could not commit on {branch}: {exc}") from None


# ---- CI ------------------------------------------------------------------------------------------
def ci_verify(root: Path, base: str | None = None, compile_archs: bool = True) -> list[str]:
    """One line per problem with the promoted kernels; empty when all is well."""
    from gates import isolation, static

    problems: list[str] = []
    entries = read_manifest(root)
    problems += _manifest_problems(entries)
    config = gate_config(root)
    git = _git(root)
    for e in entries:
        op, cid = e["op"], e["candidate"]
        tag = f"{op}/{cid}"
        a = assess(root, op, cid)
        problems += [f"{tag}: {p}" for p in a.problems]
        if a.scope is None:
            continue
        if a.scope != e["scope"]:
            problems.append(f"{tag}: manifest scope differs from candidate.json scope")
        ctx = GateContext(op=op, candidate_id=cid, root=root, config=config, base=base)
        st = static.run(ctx)
        problems += [f"{tag}: static re-run: {r}" for r in st.reasons] if st.verdict is not Verdict.PASS else []
        if git is not None and _touches(git, base, e):
            iso = isolation.run(ctx)
            if iso.verdict is not Verdict.PASS:
                problems += [f"{tag}: isolation re-run: {r}" for r in iso.reasons or [iso.verdict.value]]
        elif git is None:
            problems.append(f"{tag}: isolation re-run: not a git checkout")
        if compile_archs:
            problems += [f"{tag}: {p}" for p in _compile_problems(op, cid, root)]
    return problems


def _manifest_problems(entries: list[dict[str, Any]]) -> list[str]:
    """Entries the registry could not tell apart: one candidate twice, or two of an op with the
    same scope (the later would silently shadow the earlier)."""
    problems = []
    for i, e in enumerate(entries):
        for f in entries[:i]:
            if e["op"] != f["op"]:
                continue
            if e["candidate"] == f["candidate"]:
                problems.append(f"manifest: {e['op']}/{e['candidate']} appears twice")
            elif e["scope"] == f["scope"]:
                problems.append(f"manifest: {e['op']}/{f['candidate']} and {e['candidate']} declare the same scope")
    return problems


def _touches(git, base: str | None, entry: dict[str, Any]) -> bool:
    """Whether the change under test touches this manifest entry: its candidate's folder, or the
    entry itself when the base does not hold it (then its isolation is re-checked; other changes,
    a promotion of another candidate included, are judged by the hashes in its evidence)."""
    b = git.rev(base) if base else git.default_base()
    own = f"kernels_generated/{entry['op']}/{entry['candidate']}/"
    changed = git.changed_paths(b)
    if any(p.startswith(own) for p in changed):
        return True
    if MANIFEST_REL not in changed:
        return False
    try:
        return entry not in json.loads(git.show(b, MANIFEST_REL) or b"[]")
    except ValueError:
        return True


def _compile_problems(op: str, cid: str, root: Path) -> list[str]:
    from .toolchain.candidate import load_candidate
    from .toolchain.compile import compile_matrix

    cand = load_candidate(op, root / "kernels_generated" / op / cid)
    return [f"compile {r.arch} TP{r.tp}: {r.verdict.value}: {r.message}" for r in compile_matrix(cand) if not r.ok]


def ci_promote(root: Path, commit: bool = True) -> list[PromotionResult | str]:
    """Promote every gated, not yet promoted candidate whose evidence passes; one per op and
    scope (the best geometric-mean speedup). Returns results and one line per skipped candidate."""
    promoted = {(e["op"], e["candidate"]) for e in read_manifest(root)}
    best: dict[tuple[str, str], tuple[float, str]] = {}
    out: list[PromotionResult | str] = []
    kdir = root / "kernels_generated"
    for evdir in sorted(kdir.glob(f"*/*/{ev.EVIDENCE_DIR}")):
        op, cid = evdir.parent.parent.name, evdir.parent.name
        if (op, cid) in promoted:
            continue
        a = assess(root, op, cid)
        if a.problems:
            out.append(f"{op}/{cid}: not promoted: {a.problems[0]}")
            continue
        speed = _geomean(root, op, cid)
        slot = (op, json.dumps(a.scope, sort_keys=True))
        if slot not in best or speed > best[slot][0]:
            best[slot] = (speed, cid)
    for (op, _), (_, cid) in sorted(best.items()):
        out.append(promote(root, op, cid, commit=commit))
    return out


def _geomean(root: Path, op: str, cid: str) -> float:
    vals = [g.numbers.get("geomean_speedup", 0.0) for _, r in ev.records(root, op, cid)
            if isinstance(r, ev.EvidenceRecord) for g in r.gates if g.gate == GateName.PERF_SWEEP.value]
    return float(vals[-1]) if vals else 0.0
