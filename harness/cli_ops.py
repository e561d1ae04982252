"""`harness ops`, `harness ops show <op>`, `harness ref <op>`: the op catalogue."""
from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from .atomic_file import replacing
from .errors import UserError
from .output import console, print_json


def _defn(op: str):
    import reference_impls

    try:
        return reference_impls.get(op)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _gpu(name: str):
    from .hardware import gpu

    try:
        return gpu(name)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _point(defn, batch: int, tp: int, context: int, routing: str, state_dtype: str, shape: str = ""):
    from .agent.stages import POINT_CONTEXT
    from .opdef import Point, RoutingProfile, check_point

    try:
        prof = RoutingProfile(routing)
    except ValueError:
        raise UserError(f"unknown routing profile '{routing}' (choose from {', '.join(p.value for p in RoutingProfile)})") from None
    if context and not defn.uses_context:
        import reference_impls  # noqa: PLC0415

        readers = [d.name for d in reference_impls.all_ops() if d.uses_context]
        raise UserError(f"{defn.name} reads no KV cache; --context applies to {', '.join(readers)}")
    if defn.uses_context and context == 0:
        context = POINT_CONTEXT
    shapes = defn.extra.get("shape_names")
    if shape and not shapes:
        import reference_impls  # noqa: PLC0415

        named = [d.name for d in reference_impls.all_ops() if d.extra.get("shape_names")]
        raise UserError(f"{defn.name} has one shape; --shape applies to ops with named shapes ({', '.join(named)})")
    if shape and shape not in shapes:
        raise UserError(f"unknown shape '{shape}' for {defn.name} (choose from {', '.join(shapes)})")
    pt = Point(batch=batch, tp=tp, context=context, routing=prof, state_dtype=state_dtype, shape=shape)
    try:
        check_point(defn, pt)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return pt


def op_summary(defn, profile, tp: int = 8) -> dict:
    """Shapes, bytes and roofline floor at B=1 and B=64 for one op."""
    from .hardware import roofline
    from .opdef import Point

    row: dict = {"op": defn.name, "summary": defn.summary, "tp": tp, "gpu": profile.name, "points": {}}
    for b in (1, 64):
        pt = Point(batch=b, tp=tp, context=32768 if defn.uses_context else 0)
        rl = roofline(defn.flops(pt), defn.min_bytes(pt), profile)
        row["points"][str(b)] = {
            "shapes": {k: list(v) for k, v in defn.shapes(pt).items()},
            "min_bytes": defn.min_bytes(pt),
            "flops": defn.flops(pt),
            "floor_us": rl.floor_us,
            "bound": rl.bound,
        }
    return row


def check_save_path(save: Path) -> None:
    """A --save that cannot be written is a UserError before any work, not a traceback after it
    (`ref` here, `trace` and `eval-model` in cli_model)."""
    if save.is_dir():
        raise UserError(f"--save {save} is a directory")
    if not save.parent.is_dir():
        why = "is not a folder" if save.parent.exists() else "does not exist"
        raise UserError(f"--save {save}: {save.parent} {why}")


def register(app: typer.Typer) -> None:
    from .agent.stages import POINT_CONTEXT

    ops_app = typer.Typer(help="The Kimi K3 decode-op catalogue.", invoke_without_command=True)
    app.add_typer(ops_app, name="ops")

    @ops_app.callback()
    def ops(ctx: typer.Context,
            gpu: str = typer.Option("h200", help="GPU profile for the roofline floor (h100, h200, b200, gb300)."),
            tp: int = typer.Option(8, help="Tensor-parallel degree of the per-rank shapes."),
            json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Table of every op: shapes, minimum bytes and roofline floor at B=1 and B=64."""
        if ctx.invoked_subcommand is not None:
            return
        import reference_impls

        profile = _gpu(gpu)
        if tp not in (8, 16):
            raise UserError(f"TP {tp} is not supported (choose from 8, 16)")
        rows = [op_summary(d, profile, tp) for d in reference_impls.all_ops()]
        if json_out:
            print_json(rows)
            return
        from rich.table import Table

        t = Table(title=f"Kimi K3 decode ops, per rank at TP{tp}, roofline on {profile.name} "
                        f"({profile.hbm_bytes_per_s / 1e12:.1f} TB/s datasheet)")
        for col in ("op", "main shapes (B=1)", "MB B=1", "floor us B=1", "MB B=64", "floor us B=64", "bound B=64"):
            t.add_column(col, justify="left" if col.startswith(("op", "main")) else "right")
        for r in rows:
            p1, p64 = r["points"]["1"], r["points"]["64"]
            shapes = ", ".join(f"{k}{tuple(v)}" for k, v in list(p1["shapes"].items())[:2])
            t.add_row(r["op"], shapes, f"{p1['min_bytes'] / 1e6:.2f}", f"{p1['floor_us']:.2f}",
                      f"{p64['min_bytes'] / 1e6:.2f}", f"{p64['floor_us']:.2f}", p64["bound"])
        console().print(t)

    @ops_app.command("show")
    def ops_show(op: str = typer.Argument(..., help="Op name, e.g. moe_router."),
                 gpu: str = typer.Option("h200", help="GPU profile for the roofline."),
                 tp: int = typer.Option(8, help="Tensor-parallel degree."),
                 json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Everything the catalogue knows about one op, and what earlier sessions measured for it
        and did not keep (its ledger: prompts/kernels/<op>/measured.json)."""
        from . import paths
        from .agent.ledger import ledger_path, load_ledger

        defn = _defn(op)
        profile = _gpu(gpu)
        if tp not in (8, 16):
            raise UserError(f"TP {tp} is not supported (choose from 8, 16)")
        info = op_summary(defn, profile, tp)
        info.update({
            "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "role": t.role.value, "doc": t.doc} for t in defn.inputs],
            "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "role": t.role.value, "doc": t.doc} for t in defn.outputs],
            "tolerances": {k: {"kind": v.kind.value, "rtol": v.rtol, "atol": v.atol, "reason": v.reason} for k, v in defn.tolerances.items()},
            "scope_axes": list(defn.scope_axes),
            "uses_context": defn.uses_context,
            "uses_routing": defn.uses_routing,
            "state_dtypes": list(defn.state_dtypes),
            "notes": defn.notes,
            "definition_hash": defn.source_hash(),
            "measured": [{"idea": m.idea, "outcome": m.outcome.value, "numbers": m.numbers, "record": m.record}
                         for m in load_ledger(defn.name)],
        })
        if json_out:
            print_json(info)
            return
        c = console()
        c.print(f"[bold]{defn.name}[/bold]: {defn.summary}")
        for kind in ("inputs", "outputs"):
            c.print(f"[bold]{kind}[/bold]")
            for t in info[kind]:
                c.print(f"  {t['name']:<22} {str(tuple(t['shape'])):<28} {t['dtype']:<6} {t['role']:<10} {t['doc']}")
        c.print("[bold]tolerances[/bold]")
        for k, v in info["tolerances"].items():
            c.print(f"  {k:<22} {v['kind']} rtol={v['rtol']:g} atol={v['atol']:g}  ({v['reason']})")
        c.print(f"[bold]scope axes[/bold]: {', '.join(defn.scope_axes)}")
        for b, p in info["points"].items():
            c.print(f"B={b}: {p['min_bytes'] / 1e6:.2f} MB, {p['flops'] / 1e9:.3f} GFLOP, "
                    f"floor {p['floor_us']:.2f} us on {profile.name} ({p['bound']}-bound)")
        if defn.notes:
            c.print(f"[bold]notes[/bold]: {defn.notes}")
        if info["measured"]:
            c.print(f"[bold]measured on a GPU before, not kept[/bold] ({ledger_path(defn.name).relative_to(paths.REPO_ROOT)}):")
            for m in info["measured"]:
                c.print(f"  - {m['idea']}: [bold]{m['outcome'].replace('_', ' ')}[/bold], {m['numbers']} ({m['record']})",
                        highlight=False)

    @ops_app.command("ledger-add")
    def ops_ledger_add(op: str = typer.Argument(..., help="Op name, e.g. attn_res."),
                       idea: str = typer.Option(..., help="What was built, in words that recognise it again."),
                       outcome: str = typer.Option(..., help="slower | mixed | no_gain | faster_not_promoted."),
                       numbers: str = typer.Option(..., help="What the GPU measured, against what."),
                       record: str = typer.Option(..., help="Repo-relative path of the committed measurement."),
                       json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
        """Record an idea measured on a GPU and not kept in the op's ledger
        (prompts/kernels/<op>/measured.json), which every drafting prompt lists."""
        from .agent.ledger import Measured, Outcome, add_entry, ledger_path

        defn = _defn(op)
        try:
            kind = Outcome(outcome)
        except ValueError:
            raise UserError(f"--outcome {outcome!r}: choose from {', '.join(o.value for o in Outcome)}") from None
        n = add_entry(defn.name, Measured(idea=idea, outcome=kind, numbers=numbers, record=record))
        path = ledger_path(defn.name)
        if json_out:
            print_json({"op": defn.name, "ledger": str(path), "entries": n})
            return
        console().print(f"{path}: {n} entries (commit it with the record it cites)", highlight=False)

    @app.command("ref")
    def ref(op: str = typer.Argument(..., help="Op name."),
            batch: int = typer.Option(1, "--batch", "-b", help="Decode batch B (1..64)."),
            tp: int = typer.Option(8, "--tp", help="Tensor-parallel degree (8 or 16)."),
            context: int = typer.Option(0, "--context", help=f"Context length L (MLA only; 0 = the op's default, {POINT_CONTEXT})."),
            routing: str = typer.Option("uniform", help="MoE routing profile: uniform, zipf, hot."),
            state_dtype: str = typer.Option("fp32", help="KDA state dtype: fp32 or bf16."),
            shape: str = typer.Option("", help="Named GEMM shape (skinny_gemm), e.g. kda_in_proj."),
            seed: int = typer.Option(0, "--seed", help="Seed of the input generator."),
            save: Path = typer.Option(..., "--save", help="File to torch.save {'inputs', 'outputs'} into."),
            json_out: bool = typer.Option(False, "--json", help="Print a JSON summary.")) -> None:
        """Run the PyTorch reference on seeded inputs and save inputs and outputs."""
        defn = _defn(op)
        pt = _point(defn, batch, tp, context, routing, state_dtype, shape)
        import torch

        check_save_path(save)
        gen = torch.Generator().manual_seed(seed)
        inputs = defn.make_inputs(pt, gen, "cpu")
        outputs = defn.run_reference(inputs)
        staged = contextlib.ExitStack()
        try:
            tmp = staged.enter_context(replacing(save))     # only creating the temp file is a UserError
        except OSError as exc:
            raise UserError(f"cannot write {save}: {exc.strerror or exc}") from None
        with staged:
            torch.save({"inputs": inputs, "outputs": outputs, "op": defn.name,
                        "point": {"batch": pt.batch, "tp": pt.tp, "context": pt.context,
                                  "routing": pt.routing.value, "state_dtype": pt.state_dtype,
                                  "shape": pt.shape},
                        "seed": seed}, tmp)
        summary = {"op": defn.name, "point": pt.label(), "file": str(save),
                   "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in inputs.items()},
                   "outputs": {k: [list(v.shape), str(v.dtype)] for k, v in outputs.items()}}
        if json_out:
            print_json(summary)
        else:
            console().print(f"saved {defn.name} at {pt.label()} (seed {seed}) to {save}")
