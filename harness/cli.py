"""The `harness` command line. Each lifecycle stage registers its verbs from its own
module (cli_<stage>.py); this file only assembles them and turns user errors into one
clear line on stderr with a non-zero exit code."""
from __future__ import annotations

import importlib
import inspect
import sys

import typer

from .errors import UserError

app = typer.Typer(
    name="harness",
    help="Draft, compile, test, gate and promote CuTe DSL kernels for the Kimi K3 decode path.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# One module per lifecycle stage; a stage whose module is absent is simply not offered.
_STAGES = ("cli_ops", "cli_model", "cli_kernels", "cli_gates", "cli_optimize", "cli_dashboard", "cli_selftest")
for _name in _STAGES:
    try:
        _mod = importlib.import_module(f"harness.{_name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"harness.{_name}":
            raise
        continue
    _mod.register(app)


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """`harness --help` lists each verb with its docstring's first paragraph, and typer keeps that
    paragraph's hard line breaks, so a summary written over two source lines wrapped raggedly in the
    table. Each verb without a short_help gets its first paragraph on one line (rich wraps it);
    the verb's own --help page still shows the whole docstring."""
    for info in typer_app.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _one_line_summaries(group.typer_instance)


_one_line_summaries(app)


def main(argv: list[str] | None = None) -> None:
    import os

    from .paths import other_checkout_note

    env_root = os.environ.get("HARNESS_ROOT")
    if env_root is not None and not os.path.isdir(env_root):
        # every verb would read an empty project there and report nothing with exit 0
        print(f"harness: error: HARNESS_ROOT={env_root} is not a folder", file=sys.stderr)
        sys.exit(UserError.exit_code)
    if os.environ.get("HARNESS_DISABLE_KERNELS", "").strip():
        from .registry import env_disable_problem

        problem = env_disable_problem()   # a typo would switch every kernel off (fail closed)
        if problem:
            print(f"harness: error: {problem}", file=sys.stderr)
            sys.exit(UserError.exit_code)
    note = other_checkout_note()
    if note:
        print(f"harness: note: {note}", file=sys.stderr)
    try:
        rc = app(args=argv, standalone_mode=False)
        # Without standalone mode click returns (not raises) the code of a typer.Exit.
        if isinstance(rc, int) and rc != 0:
            sys.exit(rc)
    except UserError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("harness: aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        # Usage errors (unknown option, missing argument, bad value) are click exceptions;
        # typer ships its own copy of click, so match by shape rather than by class.
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
            msg = exc.format_message()
            if msg:                       # a group run without a command printed its help: no empty line
                print(f"harness: error: {msg}", file=sys.stderr)
            sys.exit(exc.exit_code or 2)
        raise


if __name__ == "__main__":
    main()
