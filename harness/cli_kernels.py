"""`harness candidates`, `harness check`, `harness compile`, `harness eval`: the CuTe DSL
toolchain stage (harness/toolchain)."""
from __future__ import annotations

from typing import Optional

import typer

from .errors import NotRunnable, UserError
from .output import console, print_json, to_jsonable


class CandidateFailed(UserError):
    """The candidate did not pass a stage (not a user mistake): exit 1. (harness.cli.main
    drops the code of a typer.Exit under standalone_mode=False, so verbs raise this.)"""

    exit_code = 1


def _cand(op: str, ref: str):
    from .toolchain import load_candidate

    return load_candidate(op, ref)


def _csv_ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--{what} takes comma-separated integers, got '{text}'") from None


def _positive(value: float, what: str) -> None:
    if not value > 0:
        raise UserError(f"--{what} must be positive (got {value:g})")


def _compile_rows(reps) -> list[dict]:
    return [{"arch": r.arch, "tp": r.tp, "static": r.static, "verdict": r.verdict.value, "compile_s": round(r.compile_s, 3),
             "wall_s": round(r.wall_s, 4), "cache_hit": r.cache_hit, "registers": r.max_registers,
             "spill_bytes": r.spill_bytes, "ld128_share": r.global_load_128b_share, "message": r.message} for r in reps]


def _static_axes(op: str) -> tuple[bool, bool]:
    """(several state dtypes, named shapes): the static axes beyond TP that the op's compiles and
    points vary over (kda_decode: fp32 / bf16 state; skinny_gemm, gemm_situ_and_mul, attn_res:
    named shapes). A table gets a column for an axis only when its op has it."""
    import reference_impls

    try:
        defn = reference_impls.get(op)
    except ValueError:                   # an unknown op name (a fake in a test): no extra columns
        return False, False
    return len(defn.state_dtypes) > 1, bool(defn.extra.get("shape_names"))


def _static_label(static: dict) -> str:
    """A compile's static key beyond TP, for a one-line message ("" when it has none)."""
    return "".join(f" {v}" for v in (static.get("state_dtype"), static.get("shape")) if v)


def _print_compiles(reps) -> None:
    from rich.table import Table

    has_state, has_shape = _static_axes(reps[0].op) if reps else (False, False)
    t = Table(title="compile (vector widths from PTX: SASS needs nvdisasm, absent here)")
    cols = ["arch", "TP"] + (["state dtype"] if has_state else []) + (["shape"] if has_shape else [])
    for col in cols + ["verdict", "compile s", "wall s", "cache", "regs", "spill B", "128-bit loads"]:
        t.add_column(col)
    for r in reps:
        share = "-" if r.global_load_128b_share is None else f"{r.global_load_128b_share:.0%}"
        static = ([r.static.get("state_dtype") or "-"] if has_state else []) + \
                 ([r.static.get("shape") or "(default)"] if has_shape else [])
        t.add_row(r.arch, str(r.tp), *static, r.verdict.value, f"{r.compile_s:.2f}", f"{r.wall_s:.3f}",
                  "hit" if r.cache_hit else "miss", str(r.max_registers or "-"), str(r.spill_bytes), share)
    c = console()
    c.print(t)
    for r in reps:
        if not r.ok:
            c.print(f"[red]{r.arch} TP{r.tp}{_static_label(r.static)}: {r.message}[/red]")
            if r.diagnostics:
                c.print(r.diagnostics, markup=False, highlight=False)


def _print_candidates(op: str, rows: list[dict], promoted: set[str]) -> None:
    c = console()
    if not rows:
        c.print(f"no candidates of {op} under kernels_generated/{op}/", markup=False)
    for r in rows:
        c.print(f"{'*' if r['promoted'] else ' '} {r['id']}  {r['family'] or '-':<20} {r['author']:<10} "
                f"{r['created_utc']}  batch {r['scope']['batch']} tp {r['scope']['tp']}  "
                f"evidence {r['evidence_records']}", markup=False)
    if promoted:
        c.print(f"* promoted (kernels_generated/promoted.json): {', '.join(sorted(promoted))}", markup=False)


def register(app: typer.Typer) -> None:
    @app.command("candidates")
    def candidates(op: str = typer.Argument(..., help="Op name."),
                   json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """List the candidates of an op (kernels_generated/<op>/): the promoted one marked '*',
        each with its template family ('-' when written whole) and evidence record count."""
        from . import paths
        from .evidence import EVIDENCE_DIR
        from .promotion import read_manifest
        from .toolchain import scan_candidates

        promoted = {e["candidate"] for e in read_manifest(paths.root()) if e["op"] == op}
        scan = scan_candidates(op)
        rows = [{"id": c.id, "promoted": c.id in promoted, "family": (c.provenance.template or {}).get("family"),
                 "author": c.provenance.author, "created_utc": c.provenance.created_utc, "scope": c.scope.to_json(),
                 "evidence_records": len(list((c.path / EVIDENCE_DIR).glob("*.json"))), "path": str(c.path)}
                for c in scan.candidates]
        skipped = [why for _, why in scan.unreadable]
        if json_out:
            print_json(rows)
        else:
            _print_candidates(op, rows, promoted)
        if skipped:
            raise UserError(f"{len(skipped)} candidate folder(s) of {op} skipped as unreadable; first: {skipped[0]}")

    @app.command("narrow")
    def narrow_cmd(op: str = typer.Argument(..., help="Op name."),
                   candidate: str = typer.Argument(..., help="Candidate id (or prefix) whose kernel to copy."),
                   batch: Optional[str] = typer.Option(None, help="Batch range LO-HI (e.g. 1-8)."),
                   tp: Optional[str] = typer.Option(None, help="TP degrees, comma-separated (e.g. 8)."),
                   shapes: Optional[str] = typer.Option(None, help="Named shapes, comma-separated (e.g. mla_qkv_a)."),
                   archs: Optional[str] = typer.Option(None, help="Archs, comma-separated (e.g. sm_90a)."),
                   state_dtypes: Optional[str] = typer.Option(None, "--state-dtypes", help="State dtypes, comma-separated."),
                   json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Copy a candidate's kernel under a narrower scope, as a new candidate to gate: a kernel
        that wins only at some shapes or batches can be promoted there, beside the op's broad
        kernel (the registry runs the most specific promoted kernel covering a call)."""
        from .narrowing import narrow_candidate

        changes: dict = {}
        if batch is not None:
            lo, sep, hi = batch.partition("-")
            try:
                changes["batch"] = [int(lo), int(hi if sep else lo)]
            except ValueError:
                raise UserError(f"--batch takes LO-HI (e.g. 1-8), got '{batch}'") from None
        if tp is not None:
            changes["tp"] = _csv_ints(tp, "tp")
        for key, raw in (("shapes", shapes), ("archs", archs), ("state_dtypes", state_dtypes)):
            if raw is not None:
                changes[key] = [x.strip() for x in raw.split(",") if x.strip()]
        if not changes:
            raise UserError("name what to narrow: --batch, --tp, --shapes, --archs or --state-dtypes")
        cand = narrow_candidate(op, candidate, changes)
        parent = cand.provenance.parent
        if json_out:
            print_json({"op": op, "id": cand.id, "parent": parent, "scope": cand.scope.to_json(), "path": str(cand.path)})
        else:
            console().print(f"{op}/{cand.id}: {parent}'s kernel, scope {cand.scope.to_json()}", markup=False)
            console().print(f"next: harness gate {op} {cand.id}", markup=False)

    @app.command("check")
    def check(op: str = typer.Argument(..., help="Op name."),
              candidate: str = typer.Argument(..., help="Candidate id (or prefix) or folder."),
              json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Static checks of a candidate's kernel.py (nothing runs). Exit 1 if rejected."""
        from .toolchain import check_candidate

        rep = check_candidate(_cand(op, candidate))
        if json_out:
            print_json(rep)
        else:
            console().print(rep.summary() if rep.ok else "\n".join(str(f) for f in rep.findings), markup=False)
        if not rep.ok:
            raise CandidateFailed(f"STATIC_REJECT: {len(rep.findings)} findings")

    @app.command("compile")
    def compile_cmd(op: str = typer.Argument(..., help="Op name."),
                    candidate: str = typer.Argument(..., help="Candidate id (or prefix) or folder."),
                    arch: str = typer.Option("", "--arch", help="Comma-separated archs (default: the candidate's scope)."),
                    tp: str = typer.Option("", "--tp", help="Comma-separated TP degrees (default: the scope's)."),
                    timeout_s: float = typer.Option(300.0, "--timeout-s", help="Deadline per compile."),
                    no_cache: bool = typer.Option(False, "--no-cache", help="Ignore and do not write the compile cache."),
                    json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Compile a candidate for each arch x TP in a sandboxed subprocess (cached).
        Exit 1 if any compile failed."""
        from .opdef import unsupported_tp
        from .progress import progress_bar
        from .toolchain import check_candidate, compile_matrix

        _positive(timeout_s, "timeout-s")
        for why in filter(None, map(unsupported_tp, _csv_ints(tp, "tp"))):
            raise UserError(why)                 # before the candidate loads (compile_matrix checks too)
        cand = _cand(op, candidate)
        st = check_candidate(cand)
        if not st.ok:
            if json_out:
                print_json({"verdict": "STATIC_REJECT", "static": st})
            else:
                console().print("STATIC_REJECT: " + st.summary(), markup=False)
            raise CandidateFailed("STATIC_REJECT")
        archs = [a.strip() for a in arch.split(",") if a.strip()] or None
        tps = _csv_ints(tp, "tp") or None
        with progress_bar(disable=json_out) as prog:
            n = len(archs or cand.scope.archs) * len(tps or cand.scope.tp)
            task = prog.add_task(f"compiling {cand.id}", total=n)
            reps = compile_matrix(cand, archs, tps, timeout_s=timeout_s, use_cache=not no_cache,
                                  on_done=lambda r: prog.advance(task))
        if json_out:
            print_json({"op": op, "candidate": cand.id, "compiles": [r.to_json() for r in reps]})
        else:
            _print_compiles(reps)
        bad = [r for r in reps if not r.ok]
        if bad:
            raise CandidateFailed(f"{bad[0].verdict.value} on {bad[0].arch} TP{bad[0].tp}{_static_label(bad[0].static)}: "
                                  f"{bad[0].message}")

    @app.command("eval")
    def eval_cmd(op: str = typer.Argument(..., help="Op name."),
                 candidate: str = typer.Argument(..., help="Candidate id (or prefix) or folder."),
                 batch: str = typer.Option("1,8,64", "--batch", help="Comma-separated batch sizes."),
                 tp: str = typer.Option("8", "--tp", help="Comma-separated tensor-parallel degrees (8, 16)."),
                 state_dtype: str = typer.Option("", "--state-dtype",
                                                 help="Comma-separated KDA state dtypes (fp32, bf16); default the op's first."),
                 shape: str = typer.Option("", "--shape", help="Comma-separated named GEMM shapes (skinny_gemm), e.g. "
                                                              "latent_down,mla_qkv_a; default the op's own."),
                 routing: str = typer.Option("uniform", "--routing", help="MoE routing profile."),
                 sets: int = typer.Option(10, "--sets", help="Fresh random input sets per point (>= 10 for gates)."),
                 no_timing: bool = typer.Option(False, "--no-timing", help="Correctness only."),
                 no_compiled_ref: bool = typer.Option(False, "--no-compiled-ref", help="Skip torch.compile of the reference."),
                 incumbent: Optional[str] = typer.Option(None, "--vs", help="Another candidate to time against (A B B A); "
                                                         "'promoted': at each point the promoted kernel that runs it."),
                 timeout_s: float = typer.Option(600.0, "--timeout-s", help="Deadline of the GPU worker."),
                 json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Static checks, compile for every arch at the points' TPs, state dtypes and shapes (only
        those), then on a GPU correctness and timing vs the reference and torch.compile(reference).
        Exit 0 OK, 1 failed, 3 GPU stages not run."""
        from .cli_ops import _point
        from .progress import progress_bar
        from .toolchain import evaluate_candidate
        from .toolchain.evaluate import compile_plan
        from .toolchain.verdict import Verdict

        import reference_impls

        if sets < 1:
            raise UserError(f"--sets must be >= 1 (got {sets})")
        _positive(timeout_s, "timeout-s")
        cand = _cand(op, candidate)
        defn = reference_impls.get(op)
        states = [x.strip() for x in state_dtype.split(",") if x.strip()] or [defn.state_dtypes[0]]
        shapes = [x.strip() for x in shape.split(",") if x.strip()] or [""]
        points = [_point(defn, b, t, 0, routing, s, sh) for t in _csv_ints(tp, "tp") for b in _csv_ints(batch, "batch")
                  for s in states for sh in shapes]
        if not points:
            raise UserError("no points: give --batch and --tp")
        inc = _incumbents(cand, incumbent, points) if incumbent else None
        with progress_bar(disable=json_out) as prog:
            # static checks, a compile per arch x TP x static key of the points (not the whole scope), the GPU run
            task = prog.add_task("static checks", total=2 + len(compile_plan(cand, points)))

            def on_stage(name, payload):
                if name == "compile":
                    prog.update(task, description=f"compiled {payload.arch} ({payload.verdict.value})", advance=1)
                elif name == "gpu_start":
                    prog.update(task, description=f"GPU: correctness + timing at {payload} points", advance=1)
                else:
                    prog.advance(task)

            rep = evaluate_candidate(cand, points, n_input_sets=sets, time_it=not no_timing,
                                     vs_compiled_ref=not no_compiled_ref, incumbent=inc, timeout_s=timeout_s,
                                     on_stage=on_stage)
        if json_out:
            print_json(rep)
        else:
            _print_eval(rep)
        if rep.verdict is Verdict.NOT_RUN:
            raise NotRunnable("no GPU here: compiled for every arch; correctness and timing NOT run")
        if rep.verdict is not Verdict.OK:
            raise CandidateFailed(f"{rep.verdict.value}: {rep.message}")


def _incumbents(cand, vs: str, points):
    """`harness eval --vs`: a candidate id, or "promoted" for the op's promoted kernels, each
    timed at the points it runs today (the agent loop's incumbents)."""
    if vs != "promoted":
        return _cand(cand.op, vs)
    from .agent.stages import promoted_incumbents

    incs = promoted_incumbents(cand, points)
    if not incs:
        raise UserError(f"--vs promoted: no promoted {cand.op} kernel other than {cand.id} covers these points "
                        f"(kernels_generated/promoted.json)")
    return incs


NOISY_SPREAD_PCT = 3.0     # (p90 - p10) / median of a kernel's samples; the H200 reads 0.2-1.5% on a quiet GPU


def noisy_points(rep) -> list[str]:
    """Labels of the points where the kernel's or the incumbent's timing spread exceeds
    NOISY_SPREAD_PCT. Session 36: the eager reference in the kernels' interleave showed as a 4-7%
    spread and a 2-3% bias between two copies of one kernel; quiet runs read 0.2-1.5%."""
    out = []
    for p in rep.points:
        spreads = [p.timing_us[k].get("spread_pct", 0.0) for k in ("kernel", "incumbent") if k in p.timing_us]
        if spreads and max(spreads) > NOISY_SPREAD_PCT:
            out.append(p.label + (f" {p.shape}" if p.shape else ""))
    return out


def _print_eval(rep) -> None:
    from rich.table import Table

    from .opdef import Point

    c = console()
    c.print(f"[bold]{rep.op} {rep.candidate_id}[/bold]: static {'ok' if rep.static.ok else 'REJECTED'}")
    if rep.compiles:
        _print_compiles(rep.compiles)
    if not rep.gpu_run:
        c.print(f"[yellow]correctness: not run[/yellow]\n[yellow]timing: not run[/yellow]\nverdict {rep.verdict.value}: {rep.message}")
        return
    bw = f", copy bandwidth {rep.bandwidth_bytes_per_s / 1e12:.2f} TB/s" if rep.bandwidth_bytes_per_s else ""
    c.print(f"GPU {rep.gpu} ({rep.arch}){bw}")
    t = Table(title="correctness and timing (CUDA-graph replay, inputs rotated past L2, A B B A)")
    vs = rep.incumbent_id
    several = bool(vs) and "," in vs                # --vs promoted with several kernels: name each point's
    has_state, has_shape = _static_axes(rep.op)
    cols = ["point"] + (["state dtype"] if has_state else []) + (["shape"] if has_shape else [])
    cols += ["verdict", "sets", "kernel us", "spread %", "ref us", "compiled ref us"]
    cols += (["promoted", "promoted us", "x promoted"] if several else [f"{vs} us", f"x {vs}"]) if vs else []
    for col in cols + ["x ref", "x compiled", "roofline"]:
        t.add_column(col)
    for p in rep.points:
        k = p.timing_us.get("kernel", {})
        f = lambda impl: f"{p.timing_us[impl]['median_us']:.2f}" if impl in p.timing_us else "-"  # noqa: E731
        # the point column names batch, TP (and context); state dtype and shape get their own
        label = Point(batch=p.batch, tp=p.tp, context=p.context).label() if has_shape else p.label
        static = ([p.state_dtype] if has_state else []) + ([p.shape or "(default)"] if has_shape else [])
        inc = [f("incumbent"), f"{p.speedup_vs_incumbent:.2f}" if p.speedup_vs_incumbent else "-"] if vs else []
        inc = [(p.incumbent_id or "-")[:6], *inc] if several else inc        # 6 hex digits: the table stays narrow
        t.add_row(label, *static, p.verdict.value, str(p.n_input_sets), f("kernel"),
                  f"{k['spread_pct']:.1f}" if k else "-", f("reference"), f("compiled_reference"), *inc,
                  f"{p.speedup_vs_reference:.2f}" if p.speedup_vs_reference else "-",
                  f"{p.speedup_vs_compiled_reference:.2f}" if p.speedup_vs_compiled_reference else "-",
                  f"{p.roofline_fraction:.0%}" if p.roofline_fraction else "-")
    c.print(t)
    if noisy := noisy_points(rep):
        c.print(f"[yellow]timing spread above {NOISY_SPREAD_PCT:.0f}% at {', '.join(noisy)}: something else shares the GPU "
                f"or the timing, so compare those times with care[/yellow]")
    for e in rep.incumbent_errors:
        c.print(f"[yellow]{vs} not timed at {e}[/yellow]")
    c.print(f"verdict {rep.verdict.value}: {rep.message}", markup=False)
    if rep.worker_log_tail and rep.verdict.value != "OK":
        c.print(rep.worker_log_tail[-1500:], markup=False, highlight=False)
    _ = to_jsonable
