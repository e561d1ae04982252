"""`harness optimize --op <op>`: the agent loop (harness/agent/)."""
from __future__ import annotations

import sys
from typing import Any, Optional

import typer

from .errors import NotRunnable, UserError
from .output import print_json


class RunRefused(UserError):
    """The run ended without what it was asked for (no kernel drafted, a refused --promote):
    not a user mistake, exit 1, as a failed gate (`harness gate`) or candidate (`harness check`)."""

    exit_code = 1


def _outcome(opt, s: dict) -> UserError | None:
    """Why the finished run `opt` (summary `s`) is a failure, or None: every drafting slot came
    back without a kernel (every LLM request failed, or every reply was malformed), or --promote
    was asked for and nothing was promoted. The latter exits 3 on a machine without a GPU (the
    gates that decide a promotion need one), 1 on one with a GPU (the gates or the judge refused)."""
    if s["candidates"] == 0 and s["slots_failed"]:
        first = next(iter(opt.state.failed_slots.values()), "")
        return RunRefused(f"no kernel drafted: all {s['slots_failed']} drafting slot(s) failed (first: {first})"[:500])
    p = s.get("promoted")
    if not opt.cfg.promote or (p is not None and p.get("ok")):
        return None
    if p is None:                 # resumed after its end: no gates ran again, nothing was promoted
        return RunRefused(f"--promote: run {s['run_id']} had already finished; nothing was gated or promoted")
    return (RunRefused if s["gpu_available"] else NotRunnable)(f"--promote refused: {p.get('reason')}")


def _check_base_url(url: str) -> None:
    from urllib.parse import urlparse

    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise UserError(f"--base-url {url!r}: give an http(s) URL, e.g. http://localhost:8000/v1")


def register(app: typer.Typer) -> None:
    @app.command("optimize")
    def optimize(
        op: str = typer.Option(..., "--op", help="Op to optimize, e.g. moe_router."),
        agent: str = typer.Option("template", "--agent", help="template | openai:<model> | anthropic:<model>."),
        base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible server (vLLM, Ollama) or API proxy."),
        rounds: Optional[int] = typer.Option(None, "--rounds", help="Rounds of drafting (default 3)."),
        k: Optional[int] = typer.Option(None, "--candidates-per-round", help="Candidates drafted per round (default 3)."),
        budget_usd: Optional[float] = typer.Option(None, "--budget-usd", help="Stop drafting once LLM cost reaches this."),
        max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Stop drafting once this many LLM tokens are used."),
        time_limit_s: Optional[float] = typer.Option(None, "--time-limit", help="Start no new work (a round, a draft's GPU evaluation, the final gates) after this many seconds; work under way finishes."),
        gpu: str = typer.Option("h200", "--gpu", help="GPU profile for the roofline and evaluation (h200, h100, b200, gb300)."),
        resume: Optional[str] = typer.Option(None, "--resume", help="Continue the run with this id (runs/<id>/)."),
        promote: bool = typer.Option(False, "--promote", help="Promote the best candidate if every gate passes."),
        request_timeout_s: float = typer.Option(300.0, "--request-timeout", help="Seconds per LLM request."),
        seed: int = typer.Option(0, "--seed", help="Seed of the template search."),
        json_out: bool = typer.Option(False, "--json", help="Print the run summary as JSON."),
    ) -> None:
        """Draft, compile, test and refine kernels for one op; gate the best one."""
        import reference_impls

        from .agent.display import LineLog, LiveView, print_summary
        from .agent.loop import OptimizeConfig, resume as resume_run, start
        from .hardware import gpu as gpu_profile

        try:
            reference_impls.get(op)
            gpu_profile(gpu)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if agent != "template" and ":" not in agent:
            raise UserError(f"--agent {agent!r}: use template, openai:<model> or anthropic:<model>")
        for name, val in (("--rounds", rounds), ("--candidates-per-round", k)):
            if val is not None and val < 1:
                raise UserError(f"{name} must be >= 1")
        # 0 is a budget already spent (a run that only gates or resumes); below 0 is a typo
        for name, num in (("--budget-usd", budget_usd), ("--max-tokens", max_tokens), ("--time-limit", time_limit_s)):
            if num is not None and num < 0:
                raise UserError(f"{name} must be >= 0 (got {num:g})")
        if not request_timeout_s > 0:
            raise UserError(f"--request-timeout must be positive (got {request_timeout_s:g})")
        if base_url is not None:
            _check_base_url(base_url)
        overrides: dict[str, Any] = {key: v for key, v in (("rounds", rounds), ("candidates_per_round", k), ("budget_usd", budget_usd),
                                           ("max_tokens_total", max_tokens), ("time_limit_s", time_limit_s)) if v is not None}
        live = not json_out and sys.stderr.isatty()
        view = LiveView(f"optimize {op}") if live else None
        listener = view if view is not None else LineLog()
        if resume:
            if promote:
                overrides["promote"] = True
            opt = resume_run(resume, overrides, listener=listener)
            if opt.cfg.op != op:
                raise UserError(f"run {resume} optimizes {opt.cfg.op}, not {op}")
            # a resumed run keeps the settings it started with: one given otherwise would be ignored
            for name, given, default, kept in (("--agent", agent, "template", opt.cfg.agent),
                                               ("--base-url", base_url, None, opt.cfg.base_url),
                                               ("--gpu", gpu, "h200", opt.cfg.gpu), ("--seed", seed, 0, opt.cfg.seed),
                                               ("--request-timeout", request_timeout_s, 300.0, opt.cfg.request_timeout_s)):
                if given != default and given != kept:
                    raise UserError(f"{name} {given}: run {resume} keeps the {kept} it started with; "
                                    f"drop {name} to resume it, or start a new run")
        else:
            cfg = OptimizeConfig(op=op, agent=agent, base_url=base_url, gpu=gpu, promote=promote, seed=seed,
                                 request_timeout_s=request_timeout_s, **overrides)
            opt = start(cfg, listener=listener)
        if view is not None:
            with view:
                opt.run()
        else:
            opt.run()
        s = opt.summary()
        if json_out:
            print_json(s)
        else:
            print_summary(s)
        failed = _outcome(opt, s)
        if failed is not None:
            raise failed
