"""harness/cli.py: the entry point turns user mistakes into one line on stderr and a non-zero
exit code."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv", [[], ["ci"], ["dashboard"]])
def test_a_group_without_a_command_prints_its_help_and_no_empty_error(argv: list[str], run_cli) -> None:
    code, out, err = run_cli(argv)
    assert code == 2 and "Usage" in out and "Traceback" not in out + err
    assert "harness: error:" not in err, err


@pytest.mark.parametrize("argv", [["candidates", "moe_router"], ["ci", "pins", "--json"], ["scorecard"]])
def test_a_harness_root_that_is_no_folder_is_one_line_exit_2(argv: list[str], tmp_path, run_cli, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "no_such_root"))
    code, out, err = run_cli(argv)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"harness: error: HARNESS_ROOT={tmp_path / 'no_such_root'} is not a folder"], err


@pytest.mark.parametrize("argv", [["candidates", "moe_router"], ["trace", "--help"]])
def test_a_kill_switch_naming_no_op_is_one_line_exit_2(argv: list[str], run_cli, monkeypatch) -> None:
    """HARNESS_DISABLE_KERNELS=moe_routr would switch every kernel off (fail closed); the CLI says
    so before any verb runs rather than let a typo pass unseen."""
    monkeypatch.setenv("HARNESS_DISABLE_KERNELS", "moe_router,moe_routr")
    code, out, err = run_cli(argv)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("harness: error: HARNESS_DISABLE_KERNELS names no op: moe_routr ("), err


def test_a_kill_switch_of_real_ops_lets_the_verb_run(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_DISABLE_KERNELS", "all")
    code, out, err = run_cli(["candidates", "moe_router"])
    assert code == 0 and "HARNESS_DISABLE_KERNELS" not in err, err


def _verbs(typer_app, prefix: tuple[str, ...] = ()):
    """(group argv, verb name, callback docstring) of every verb, groups included."""
    for info in typer_app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        yield prefix, name, info.callback.__doc__ or ""
    for group in typer_app.registered_groups:
        yield from _verbs(group.typer_instance, prefix + (group.name,))


def test_every_verb_is_listed_with_its_whole_first_paragraph_on_one_line(run_cli, monkeypatch) -> None:
    """typer keeps a docstring's hard line breaks in the command table, so a summary written over
    two source lines used to wrap raggedly; on a wide terminal each must sit on one line."""
    import inspect

    from harness.cli import app

    monkeypatch.setenv("COLUMNS", "400")
    verbs = list(_verbs(app))
    assert len(verbs) >= 20
    multi_line = 0
    for group, name, doc in verbs:
        first = inspect.cleandoc(doc).split("\n\n")[0]
        multi_line += "\n" in first
        code, out, _ = run_cli([*group, "--help"])
        assert code == 0
        row = next((ln for ln in out.splitlines() if ln.lstrip("│ ").startswith(name + " ")), None)
        assert row is not None, (group, name)
        assert " ".join(first.split()) in " ".join(row.split()), (group, name, row)
    assert multi_line >= 5        # the case the fix is for is really exercised


@pytest.mark.parametrize("argv", [["compile", "add_rmsnorm", "48258d", "--arch", "sm_80"],
                                  ["eval-model", "--config", "nope"]])
def test_a_mistake_caught_after_the_progress_bar_started_leaves_stdout_empty(argv: list[str], run_cli) -> None:
    """Progress bars live on stderr and only on a terminal: a transient rich bar stopping on a
    pipe used to write a blank line to stdout ahead of the one-line error."""
    code, out, err = run_cli(argv)
    assert code == 2 and out == "", repr(out)
    assert [ln for ln in err.splitlines() if ln.strip()][0].startswith("harness: error: unknown")
