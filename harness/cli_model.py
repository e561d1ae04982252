"""`harness eval-model` and `harness trace`: the K3 decode path, kernels on vs off, and the
registry's record of which implementation ran."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from .cli_ops import check_save_path
from .errors import UserError
from .output import console, print_json, to_jsonable


def _counter_table(title: str, rows: list[dict[str, Any]]):
    from rich.table import Table

    t = Table(title=title)
    for col in ("op", "outcome", "reason", "count"):
        t.add_column(col, justify="right" if col == "count" else "left")
    for r in rows:
        style = "green" if r["outcome"] == "kernel" else ("red" if r["reason"] == "error" else "")
        t.add_row(r["op"], r["outcome"], r["reason"], str(r["count"]), style=style)
    return t


def _cpu_threads() -> None:
    """Tiny CPU decodes are op-launch bound: one torch thread avoids oversubscription
    (measured 3.4 s/step with the default threads on a loaded 2-core box, 0.2 s with one)."""
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(1)


def _trace_doc(reg) -> dict[str, Any]:
    from . import registry

    calls = reg.candidate_counters()
    return {"counters": registry.counter_rows(reg.counters()), "errors": reg.errors(),
            "promoted": [{"op": e.op, "candidate": e.candidate, "scope_size": e.scope.size(),
                          "kernel_calls": calls.get((e.op, e.candidate), 0)} for e in reg.entries()]}


def _rows_from_file(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A saved trace ({"counters": rows}) or an eval-model JSON (paths[].trace)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read trace {path}: {exc}") from None
    if isinstance(doc, dict) and "counters" in doc:
        return {"trace": _counter_rows(path, doc["counters"])}
    if isinstance(doc, dict) and "paths" in doc:
        paths_ = doc["paths"]
        if not isinstance(paths_, list) or not all(isinstance(p, dict) and "kernels" in p and "trace" in p
                                                   for p in paths_):
            raise UserError(f"{path}: 'paths' must be a list of {{kernels, trace}} (an eval-model result)")
        return {f"kernels {p['kernels']}": _counter_rows(path, p["trace"]) for p in paths_}
    raise UserError(f"{path} is neither a saved trace nor an eval-model result")


_ROW_KEYS = ("op", "outcome", "reason", "count")


def _counter_rows(path: Path, rows: Any) -> list[dict[str, Any]]:
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in _ROW_KEYS) for r in rows):
        raise UserError(f"{path}: counters must be a list of {{{', '.join(_ROW_KEYS)}}} rows")
    return rows


def _write_json(save: Path, doc: Any) -> None:
    try:
        save.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"cannot write {save}: {exc.strerror or exc}") from None


def register(app: typer.Typer) -> None:
    @app.command("trace")
    def trace_cmd(
        from_file: Optional[Path] = typer.Option(None, "--from", help="print a saved trace or eval-model JSON"),
        config: str = typer.Option("tiny", help="model config for the live decode (a preset, e.g. tiny-addnorm)"),
        steps: int = typer.Option(4, help="decode steps of the live run"),
        batch: int = typer.Option(2, help="rows of the live run"),
        save: Optional[Path] = typer.Option(None, help="write the trace JSON here"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Registry counters (op, kernel|fallback, reason): from a short live decode or a file."""
        if from_file is not None:
            tables = _rows_from_file(from_file)
            if as_json:
                print_json(tables)
                return
            for title, rows in tables.items():
                console().print(_counter_table(title, rows))
            return
        import torch

        from . import registry
        from .model import DecodeCache, K3Decoder, get_config, init_weights

        if steps < 1 or batch < 1:
            raise UserError("--steps and --batch must be >= 1")
        if save is not None:
            check_save_path(save)
        _cpu_threads()
        cfg = get_config(config)
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        reg = registry.default()
        model = K3Decoder(cfg, init_weights(cfg, 0, dev), reg)
        cache = DecodeCache.allocate(cfg, batch, 4 + steps + 1, dev)
        logits = model.prefill([[cfg.bos_id, 72, 105, 33][: 4 - b % 2] for b in range(batch)], cache)
        for _ in range(steps):
            logits = model.step(logits.argmax(-1), cache)
        doc = _trace_doc(reg)
        if save is not None:
            _write_json(save, doc)
        if as_json:
            print_json(doc)
            return
        console().print(_counter_table(f"registry trace: {config}, {steps} steps, B={batch}", doc["counters"]))
        for e in doc["promoted"]:
            console().print(f"{e['op']} {e['candidate']}: {e['kernel_calls']} kernel calls", markup=False)
        for op, msg in doc["errors"].items():
            console().print(f"[red]kernel error[/red] {op}: {msg}")

    @app.command("eval-model")
    def eval_model_cmd(
        config: str = typer.Option("tiny", help="tiny | k3-tp8-rank | k3-tp16-rank, each also as <name>-addnorm "
                                   "(K2-style add_rmsnorm residual instead of AttnRes)"),
        steps: int = typer.Option(8, help="decode steps (>= 1024 for the long-generation check)"),
        context: int = typer.Option(16, help="prompt tokens before decoding (>= 32768 on GPU configs)"),
        kernels: str = typer.Option("both", help="on | off | both"),
        batch: int = typer.Option(2, help="sequences decoded together (different lengths)"),
        layers: Optional[int] = typer.Option(None, help="layer count (K3 rank configs default to 8)"),
        seed: int = typer.Option(0),
        structured: int = typer.Option(2, help="rows of JSON-schema constrained generation per path"),
        fill: str = typer.Option("prefill", help="prefill (feed the prompts) | random (seeded random caches: fast long context)"),
        save: Optional[Path] = typer.Option(None, help="write the result JSON here"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Decode the same prompts with the registry's kernels on and off; compare logits."""
        from .model.evaluate import KernelsMode, evaluate_model
        from .progress import progress_bar

        try:
            mode = KernelsMode(kernels)
        except ValueError:
            raise UserError(f"--kernels must be on, off or both (got '{kernels}')") from None
        if save is not None:
            check_save_path(save)
        _cpu_threads()
        with progress_bar(disable=as_json) as bar:
            task = bar.add_task("eval-model", total=None)

            def tick(what: str, i: int, n: int) -> None:
                bar.update(task, description=f"{what} {i}/{n}", completed=i, total=n)

            res = evaluate_model(config, steps=steps, context=context, batch=batch, kernels=mode, seed=seed,
                                 structured=structured, n_layers=layers, fill=fill, progress=tick)
        doc = to_jsonable(res)
        if save is not None:
            _write_json(save, doc)
        if as_json:
            print_json(doc)
            return
        c = console()
        c.print(f"[bold]{res.config}[/bold] ({res.n_layers} layers) on {res.device}: {res.steps} steps after "
                f"{res.context}-token context, B={res.batch}, seed {res.seed}, kernels {res.kernels.value}, "
                f"{res.wall_s:.1f} s")
        if res.greedy_agreement is not None:
            c.print(f"greedy agreement {100 * res.greedy_agreement:.2f}%   max |logit err| {res.max_logit_err:.3g}   "
                    f"KL mean {res.mean_kl:.3g} max {res.max_kl:.3g}")
        for p in res.paths:
            c.print(f"kernels {p.kernels}: schema-valid {p.schema_valid}/{p.schema_total} "
                    f"({100 * p.schema_valid_rate:.0f}%), kernel calls {p.kernel_calls}, decode {p.decode_s:.1f} s")
            c.print(_counter_table(f"trace, kernels {p.kernels}", p.trace))
