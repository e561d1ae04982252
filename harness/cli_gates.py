"""`harness gate`, `harness promote`, `harness demote`, `harness ci verify|promote|pins`."""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import typer

from .errors import UserError
from .output import console, print_json


def _resolve(op: str, ref: str) -> tuple[Path, str]:
    """(root, candidate id): an exact folder name is taken as is (so a folder whose content
    no longer matches its id still reaches the gates and fails there); else a unique prefix."""
    import reference_impls

    from . import paths

    try:
        reference_impls.get(op)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    root = paths.root()
    if not ref.strip():                  # "" is the current folder to Path
        raise UserError(f"empty candidate id (see `harness candidates {op}`)")
    folder = Path(ref)
    if not folder.is_dir():
        folder = root / "kernels_generated" / op / ref
    if not folder.is_dir():
        base = root / "kernels_generated" / op
        hits = sorted(p for p in base.glob(f"{ref}*") if p.is_dir()) if base.is_dir() and ref else []
        if len(hits) != 1:
            raise UserError(f"candidate '{ref}' of {op}: {'matches several candidates' if hits else 'not found'}")
        folder = hits[0]
    folder = folder.resolve()
    if folder.parent != (root / "kernels_generated" / op).resolve():
        raise UserError(f"{folder} is not under kernels_generated/{op}/")
    return root, folder.name


def _parse_only(only: Optional[str]):
    from gates import GateName

    if not only:
        return None
    out = []
    for name in only.split(","):
        try:
            out.append(GateName(name.strip()))
        except ValueError:
            raise UserError(f"unknown gate '{name.strip()}' (choose from {', '.join(g.value for g in GateName)})") from None
    return out


def _check_base(root: Path, base: Optional[str]) -> None:
    """A --base that names no commit is a UserError, not an isolation NOT_RUN (gate) or a
    GitError traceback (ci verify)."""
    from gates._git import Git, GitError

    if base is None:
        return
    try:
        git = Git(root)
    except GitError as exc:
        raise UserError(f"--base {base}: {exc}") from None
    if not base or not git.has_ref(base):
        raise UserError(f"--base '{base}' is not a commit of {root}")


_STYLE = {"pass": "green", "fail": "red", "error": "red", "not_run": "yellow"}


def _check_model_config(name: str) -> None:
    """A bad --model-config is a UserError now, not a gate ERROR minutes later."""
    from gates._k3 import parse_model_config
    from harness.model.config import get_config

    preset, layers = parse_model_config(name, 1)
    get_config(preset, layers or None)


def _log_gate_done(res) -> None:
    print(f"harness gate: {res.gate} {res.verdict.value} after {res.duration_s:.1f} s", file=sys.stderr, flush=True)


class _Terminated(Exception):
    """SIGTERM arrived while the gates ran (e.g. `timeout` on a lent machine's time limit)."""


EXIT_INTERRUPTED = 143            # 128 + SIGTERM, what a shell reports for a process ended by it


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Turn SIGTERM into _Terminated for the duration, so the gates already finished are still
    written as evidence instead of dying with the process."""
    def handler(signum, frame):   # noqa: ARG001 - signal handler signature
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def register(app: typer.Typer) -> None:
    @app.command("gate")
    def gate(op: str = typer.Argument(..., help="Op name, e.g. moe_router."),
             candidate: str = typer.Argument(..., help="Candidate id (or unique prefix, or folder)."),
             only: Optional[str] = typer.Option(None, "--only", help="Comma-separated gates (default: all)."),
             base: Optional[str] = typer.Option(None, "--base", help="Base commit for isolation (default: merge-base with main)."),
             model_config: Optional[str] = typer.Option(
                 None, "--model-config",
                 help="K3 config for numerics_model and the layer A/B: a preset[:layers] (harness.model.config.PRESETS); default on a GPU k3-tp8-rank, k3-tp8-rank-addnorm for add_rmsnorm; without a GPU tiny (CPU smoke)."),
             write: bool = typer.Option(True, "--write/--no-write", help="Write the evidence record."),
             json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Run the fast-track gates on a candidate and write an evidence record. Without a GPU
        the GPU gates are reported NOT_RUN, never passed. Exit 1 if any gate failed."""
        from gates import GateContext
        from gates.suite import run_gates

        from . import evidence as ev
        from .promotion import gate_config

        root, cid = _resolve(op, candidate)
        chosen = _parse_only(only)
        _check_base(root, base)
        config = gate_config(root)
        if model_config is None:
            from harness.toolchain.evaluate import gpu_available

            from harness.model.config import candidate_gate_model_config

            model_config = candidate_gate_model_config(root, op, cid) if gpu_available() else "tiny"
        _check_model_config(model_config)
        ctx = GateContext(op=op, candidate_id=cid, root=root, config=config, base=base, model_config=model_config)
        done: list = []                  # the gates finished so far, kept if the run is cut short
        interrupted = False

        def finished(res, report) -> None:
            done.append(res)
            report(res)
        try:
            with _sigterm_raises():
                if json_out:
                    # stdout carries the JSON; a line per finished gate on stderr shows, in a log cut
                    # short by a timeout, which gates finished and how long each took
                    results = run_gates(ctx, chosen, on_done=lambda r: finished(r, _log_gate_done))
                else:
                    from .progress import progress_bar

                    with progress_bar() as prog:
                        task = prog.add_task(f"gating {op}/{cid}", total=len(chosen or range(6)))
                        results = run_gates(ctx, chosen, on_done=lambda r: finished(r, lambda _: prog.advance(task)))
        except (_Terminated, KeyboardInterrupt):
            results, interrupted = list(done), True
            print(f"harness gate: interrupted after {len(done)} finished gate(s); "
                  f"{'writing their evidence' if done and write else 'nothing to write'}", file=sys.stderr, flush=True)
            if not results:
                raise typer.Exit(EXIT_INTERRUPTED)
        iso = next((r for r in results if r.gate == "isolation"), None)
        rec = ev.build(root, op, cid, results, config.version,
                       base_commit=str(iso.numbers.get("base_commit", "")) if iso else "",
                       head_commit=_head(root))
        path = ev.write(rec, root) if write else None
        if json_out:
            print_json({"record": str(path) if path else None, "interrupted": interrupted, **rec.to_dict()})
        else:
            c = console()
            for r in results:
                c.print(f"[{_STYLE[r.verdict.value]}]{r.verdict.value.upper():8}[/] {r.gate:15} {r.duration_s:7.2f} s")
                for reason in r.reasons[:8]:
                    c.print(f"         {reason}", markup=False)
            c.print(f"evidence: {path}" if path else "evidence not written (--no-write)")
            if interrupted:
                c.print(f"interrupted: {len(results)} gate(s) finished; run the others with --only")
        if interrupted:
            raise typer.Exit(EXIT_INTERRUPTED)
        if any(r.verdict.value in ("fail", "error") for r in results):
            raise typer.Exit(1)

    @app.command("promote")
    def promote_cmd(op: str = typer.Argument(..., help="Op name."),
                    candidate: str = typer.Argument(..., help="Candidate id (or unique prefix)."),
                    commit: bool = typer.Option(True, "--commit/--no-commit", help="Commit on branch promote/<op>/<id>."),
                    json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Promote a candidate into the decode path if its evidence is complete, every gate
        passed and every hash matches the files; commits on promote/<op>/<candidate>."""
        from .promotion import PromotionRefused, promote

        root, cid = _resolve(op, candidate)
        try:
            res = promote(root, op, cid, commit=commit)
        except PromotionRefused as exc:
            if json_out:
                print_json({"op": op, "candidate": cid, "promoted": False, "problems": exc.problems})
            elif len(exc.problems) > 1:
                # one problem is the error line itself; more get a header and a list, then their count
                print(f"harness: {op}/{cid} cannot be promoted:", file=sys.stderr)
                for p in exc.problems:
                    print(f"  - {p}", file=sys.stderr)
                raise UserError(f"refusing to promote {op}/{cid}: {len(exc.problems)} problems (listed above)") from None
            raise
        _report(res, json_out)

    @app.command("demote")
    def demote_cmd(op: str = typer.Argument(..., help="Op name."),
                   candidate: Optional[str] = typer.Option(None, "--candidate",
                                                           help="Remove only this entry (an op may hold a broad and narrower kernels)."),
                   commit: bool = typer.Option(True, "--commit/--no-commit", help="Commit on branch demote/<op>/<id>."),
                   json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Remove an op's promoted kernels (or one of them, --candidate) from the manifest: the
        decode path uses the reference where no promoted kernel of the op is left."""
        import reference_impls

        from . import paths
        from .promotion import demote

        try:
            reference_impls.get(op)
        except ValueError as exc:             # a typo is not "no promoted kernel"
            raise UserError(str(exc)) from None
        _report(demote(paths.root(), op, commit=commit, candidate=candidate), json_out)

    ci_app = typer.Typer(help="CI: verify promoted kernels, promote gated candidates.", no_args_is_help=True)
    app.add_typer(ci_app, name="ci")

    @ci_app.command("verify")
    def ci_verify_cmd(base: Optional[str] = typer.Option(None, "--base", help="Base commit of the change under test."),
                      compile_archs: bool = typer.Option(True, "--compile/--no-compile", help="Compile for every declared arch."),
                      json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """For each promoted kernel: evidence present and matching, isolation and static gates
        re-run, compile for every target arch. One line per problem; exit 1 on any."""
        from . import paths
        from .promotion import ci_verify, read_manifest

        root = paths.root()
        _check_base(root, base)
        problems = ci_verify(root, base=base, compile_archs=compile_archs)
        n = len(read_manifest(root))
        if json_out:
            print_json({"promoted": n, "problems": problems, "ok": not problems})
        else:
            for p in problems:
                print(p)
            print(f"ci verify: {n} promoted kernel(s), {len(problems)} problem(s)")
        if problems:
            raise typer.Exit(1)

    @ci_app.command("promote")
    def ci_promote_cmd(commit: bool = typer.Option(True, "--commit/--no-commit", help="Commit each promotion on its branch."),
                       json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Promote every gated candidate whose evidence passes (one per op)."""
        from . import paths
        from .promotion import ci_promote

        out = ci_promote(paths.root(), commit=commit)
        if json_out:
            print_json([o if isinstance(o, str) else o for o in out])
            return
        for o in out:
            print(o if isinstance(o, str) else f"promoted {o.op}/{o.candidate_id} on {o.branch or '(no commit)'} {o.commit[:12]}")
        if not out:
            print("ci promote: nothing to promote (no candidate outside promoted.json has gate evidence)")


    @ci_app.command("pins")
    def ci_pins_cmd(paths_: list[str] = typer.Argument(None, metavar="[PATH]...",
                                                       help="Files to look up (default: a summary per gate)."),
                    files: bool = typer.Option(False, "--files", help="List every file each gate pins."),
                    json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Which gates' evidence pins which files: an edit to a file stales the verdicts of the
        gates that pin it, and only those (re-run them with `harness gate OP ID --only G,...`)."""
        from . import paths
        from .pin_report import gate_pins, path_pins

        root = paths.root()
        if paths_:
            found = path_pins(root, paths_)
            if json_out:
                print_json(found)
                return
            for f in found:
                print(f"{f.path}: {', '.join(f.gates) if f.gates else 'no gate code pins it'}")
            return
        pins = gate_pins(root)
        if json_out:
            print_json(pins)
            return
        for g in pins:
            print(f"{g.gate:15} {g.code_sha256[:12]}  {len(g.files):3d} files")
            if files:
                for path in g.files:
                    print(f"    {path}")


def _head(root: Path) -> str:
    from gates._git import Git, GitError

    try:
        return Git(root).rev("HEAD")
    except GitError:
        return ""


def _report(res, json_out: bool) -> None:
    if json_out:
        print_json(res)
        return
    c = console()
    c.print(f"{res.action}d {res.op}/{res.candidate_id}" + (f" on branch {res.branch} ({res.commit[:12]})" if res.commit else ""))
    for g, info in res.gates.items():
        c.print(f"  {g:15} {info['verdict']}  {info['record']}", markup=False)
