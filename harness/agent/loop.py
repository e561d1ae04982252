"""The agent loop of `harness optimize`: rounds of draft -> static -> compile -> evaluate,
results fed into the next round, then the full gates for the best verified candidate.

Every step is an event in runs/<run-id>/events.jsonl, written before the loop moves on, so
a run killed anywhere resumes (`--resume`) by replaying the log: drafted slots are not
drafted again, finished stages are not run again, the budget spent so far is kept.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from .. import paths
from ..errors import UserError
from ..hardware import TARGET_ARCHS, gpu
from .agents import Draft, LLMAgent, ParentContext, TemplateAgent
from .budget import Budget, StopReason
from .families import load_families
from .prompting import draft_prompt, feedback_prompt, geomean, system_prompt
from .providers import RetryPolicy, make_provider
from .records import CandidateRecord, ScoreKind, StageStatus
from .runlog import EventKind, RunLog, new_run_id
from .search import compile_proxy
from .stages import ToolchainStages, promoted_candidate
from .state import RunState


@dataclass
class OptimizeConfig:
    op: str
    agent: str = "template"
    base_url: str | None = None
    rounds: int = 3
    candidates_per_round: int = 3
    budget_usd: float | None = None
    max_tokens_total: int | None = None
    time_limit_s: float | None = None
    gpu: str = "h200"
    archs: list[str] = field(default_factory=lambda: list(TARGET_ARCHS))
    tp: int = 8
    promote: bool = False
    seed: int = 0
    request_timeout_s: float = 300.0
    max_attempts: int = 5                 # provider attempts per request (429/5xx/timeouts)
    retry_base_delay_s: float = 1.0
    max_reply_attempts: int = 3           # malformed replies re-asked per slot
    max_output_tokens: int = 8192
    compile_workers: int | None = None    # compiles at once; None: toolchain.compile.default_jobs()
                                          # (one per core up to 8; 2 on CI, 8 on the 16-core H200 host)
    run_gates: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OptimizeConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


Listener = Callable[[str, RunState], None]


class Optimizer:
    def __init__(self, cfg: OptimizeConfig, log: RunLog, stages: ToolchainStages | None = None,
                 listener: Listener | None = None):
        import reference_impls

        self.cfg = cfg
        self.log = log
        self.defn = reference_impls.get(cfg.op)
        self.profile = gpu(cfg.gpu)
        self.stages = stages or ToolchainStages(cfg.gpu, cfg.tp)
        self.listener = listener or (lambda msg, st: None)
        self.worked = False          # this process ran a stage or finished a round
        self._hints: dict[str, dict[str, Any] | None] = {}   # candidate id -> its narrow hint (_narrow_hint)
        self.state = RunState.replay(log)
        self.budget = Budget(cfg.max_tokens_total, cfg.budget_usd, cfg.time_limit_s)
        self.budget.charge(0, 0, self.state.cost_usd)     # spend replayed from the log
        self.budget.tokens = self.state.tokens
        self.template: TemplateAgent | None = None
        self.around_id: str | None = None             # the promoted kernel the template search starts around
        self.llm: LLMAgent | None = None
        if cfg.agent == "template":
            fams = load_families(cfg.op, paths.prompts_dir())
            if not fams:
                raise UserError(f"no kernel families for {cfg.op} under {paths.prompts_dir() / 'kernels' / cfg.op} "
                                "(see docs/ARCHITECTURE.md, 'Kernel families')")
            around = promoted_proposal(cfg.op, fams)
            self.around_id = around[1] if around else None
            self.template = TemplateAgent(fams, cfg.seed, (around[0],) if around else ())
        else:
            policy = RetryPolicy(cfg.max_attempts, cfg.retry_base_delay_s, 60.0, cfg.request_timeout_s)
            prov = make_provider(cfg.agent, cfg.base_url, policy, self.budget, on_attempt=self._on_attempt)
            self.system = system_prompt(self.defn, self.profile, tuple(cfg.archs), (8, 16))
            self.llm = LLMAgent(prov, log, self.system, cfg.max_reply_attempts, cfg.max_output_tokens)

    # ---- events ----------------------------------------------------------------------
    def _emit(self, kind: EventKind, msg: str = "", **data: Any) -> None:
        ev = self.log.append(kind, **data)
        self.state.apply(ev.kind, ev.data)
        if kind in (EventKind.STAGE, EventKind.ROUND_FINISHED):
            self.worked = True
        if msg:
            self.listener(msg, self.state)

    def _on_attempt(self, rec: dict) -> None:
        # provider threads: the log serializes appends; totals are replayed from LLM_CALL
        self._emit(EventKind.LLM_CALL, f"{rec['provider']} attempt {rec['attempt']}: {rec['outcome']}", **rec)

    # ---- the run ---------------------------------------------------------------------
    def run(self) -> RunState:
        if not self.state.config:
            self._emit(EventKind.RUN_STARTED, "run started", config=self.cfg.to_json(), run_id=self.log.folder.name,
                       gpu_available=self.stages.has_gpu)
        else:
            self._emit(EventKind.RUN_RESUMED, "run resumed", rounds_finished=sorted(self.state.rounds_finished))
            if self.stages.has_gpu:
                self._measure_deferred()
        for r in range(1, self.cfg.rounds + 1):
            if r in self.state.rounds_finished:
                continue
            if (why := self.budget.exhausted()) is not None:
                self._emit(EventKind.STOPPED, f"stopped: {why.value}", reason=why.value, round=r)
                break
            if not self._round(r):
                break
        if not self.state.finished or self.worked:
            # a resumed run that did more (say the drafts a --time-limit left) comes to its end
            # again; one resumed after its end (or killed there) does not repeat it
            self._finish(again=self.state.finished)
        self.write_summary()
        return self.state

    def _round(self, r: int) -> bool:
        """One round; False when the time limit stopped it before every draft was evaluated
        (the round stays open: --resume evaluates the rest)."""
        if r not in self.state.rounds_started:
            self._emit(EventKind.ROUND_STARTED, f"round {r}", round=r)
        drafts = self._drafts(r)
        for d in drafts:
            self._land(d)
        ids = self.state.round_ids(r)
        self._stages(ids)
        waiting = self.state.unscored(ids)
        if waiting:
            reason = StopReason.TIME.value
            self._emit(EventKind.STOPPED, f"stopped: {reason}; not evaluated: {', '.join(waiting)} "
                       f"({self._resume_command()})",
                       reason=reason, round=r, not_evaluated=waiting)
            return False
        best = self.state.ranked()[0] if self.state.ranked() else None
        self._emit(EventKind.ROUND_FINISHED, f"round {r} done", round=r,
                   best=best.id if best else None, best_score=best.score if best else None)
        self.write_summary()
        return True

    # ---- drafting --------------------------------------------------------------------
    def _pending_slots(self, r: int) -> list[int]:
        return [s for s in range(self.cfg.candidates_per_round)
                if (r, s) not in self.state.drafts and (r, s) not in self.state.failed_slots]

    def _drafts(self, r: int) -> list[Draft]:
        pending = self._pending_slots(r)
        if self.template is not None:
            if r not in self.state.proposals:
                props = self.template.plan(r, self.cfg.candidates_per_round, self.state.template_scores())
                near = f" (first round: around the promoted {self.around_id})" if self.around_id and r == 1 else ""
                self._emit(EventKind.PROPOSALS, f"round {r}: {len(props)} configurations{near}",
                           round=r, proposals=[{"family": p.family, "params": p.params} for p in props],
                           around=self.around_id)
            from .search import Proposal

            props = [Proposal(p["family"], p["params"]) for p in self.state.proposals[r]]
            return [self.template.draft(r, s, props[s]) for s in pending if s < len(props)]
        assert self.llm is not None
        jobs = [(s, self._llm_inputs(r, s)) for s in pending]
        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            futs = [pool.submit(self.llm.draft, r, s, text, parent) for s, (text, parent) in jobs]
            return [f.result() for f in futs]

    def _llm_inputs(self, r: int, slot: int) -> tuple[str, ParentContext | None]:
        best = self.state.best_verified() or (self.state.ranked()[0] if self.state.ranked() else None)
        best_src = self._source(best.id) if best else None
        history = sorted(self.state.records.values(), key=lambda c: (c.round, c.slot))
        text = draft_prompt(self.defn, self.profile, self.cfg.tp, best, best_src, history,
                            incumbents=self.state.incumbent_times(),
                            promoted=self._promoted_source() if best is None else None)
        parents = self._parents()
        if not parents:
            return text, None
        p = parents[slot % len(parents)]
        reply = self._reply_of(p.id)
        if reply is None:
            return text, None
        step = "It is the best so far: make it faster." if best and p.id == best.id else \
            "Fix the problems above first."
        return text, ParentContext(p.id, reply, feedback_prompt(p, self.profile, step))

    def _parents(self) -> list[CandidateRecord]:
        """What the next round refines: the ranked candidates, then the failed ones (newest first)."""
        ranked = self.state.ranked()
        failed = sorted((c for c in self.state.records.values() if c not in ranked),
                        key=lambda c: (-c.round, c.slot))
        return (ranked + failed)[: max(1, self.cfg.candidates_per_round)]

    def _reply_of(self, cid: str) -> str | None:
        for d in self.state.drafts.values():
            if d["id"] == cid and d.get("files"):
                reply = [f for f in d["files"] if (self.log.folder / "replies" / f).is_file()]
                if reply:
                    return (self.log.folder / "replies" / reply[-1]).read_text()
        return None

    def _promoted_source(self) -> tuple[str, str] | None:
        """(id, kernel.py) of the op's promoted kernel: what a first draft starts from and must beat."""
        inc = promoted_candidate(self.cfg.op)
        return (inc.id, inc.source) if inc is not None else None

    def _source(self, cid: str) -> str | None:
        p = paths.kernels_dir() / self.cfg.op / cid / "kernel.py"
        return p.read_text() if p.is_file() else None

    def _land(self, d: Draft) -> None:
        """Write the candidate folder (harness-chosen path and scope) and log the draft."""
        if d.source is None:
            self._emit(EventKind.DRAFT_FAILED, f"r{d.round} s{d.slot}: no kernel ({d.error})", round=d.round,
                       slot=d.slot, reason=d.error, final=True, files=d.files)
            return
        from ..toolchain.candidate import Provenance, Scope, create_candidate

        scope_json = {**Scope(archs=tuple(self.cfg.archs)).to_json(), **d.scope}
        scope = Scope.from_json(scope_json)
        prov = Provenance(author=d.author, parent=d.parent, prompt_hash=d.prompt_hash, template=d.template)
        cand = create_candidate(self.cfg.op, d.source, scope, prov)
        self._emit(EventKind.DRAFT, f"r{d.round} s{d.slot}: drafted {cand.id}", round=d.round, slot=d.slot,
                   id=cand.id, author=d.author, prompt_hash=d.prompt_hash, parent=d.parent,
                   template=d.template, files=d.files)

    # ---- stages ----------------------------------------------------------------------
    def _stages(self, ids: list[str]) -> None:
        from ..toolchain.candidate import load_candidate

        cands = {cid: load_candidate(self.cfg.op, cid) for cid in ids}
        for cid, cand in cands.items():
            if not self.state.has_stage(cid, "static"):
                res = self.stages.static(cand)
                self._emit(EventKind.STAGE, f"{cid}: static {'ok' if res.ok else 'refused'}", id=cid,
                           stage="static", result={"ok": res.ok, "problems": res.problems})
        jobs = [(cid, a) for cid in ids if self.state.records[cid].static_ok
                for a in self.cfg.archs if not self.state.has_stage(cid, "compile", a)]
        with ThreadPoolExecutor(max_workers=self.compile_workers()) as pool:
            futs = {pool.submit(self.stages.compile, cands[cid], a): (cid, a) for cid, a in jobs}
            for fut in futs:
                cid, a = futs[fut]
                built = fut.result()
                self._emit(EventKind.STAGE, f"{cid}: compile {a} {built.status.value}", id=cid, stage="compile",
                           result=asdict(built))
        for cid in ids:
            rec = self.state.records[cid]
            if not self.state.has_stage(cid, "evaluate"):
                if rec.static_ok and rec.compiled_everywhere:
                    if self.stages.has_gpu and self.budget.time_up():
                        # a GPU evaluation takes tens of seconds: none starts past --time-limit;
                        # the draft stays unscored for --resume (the round is not finished)
                        continue
                    self._evaluate(cid, cands[cid])
            if not self.state.has_stage(cid, "score"):
                self._rescore(cid)

    def _evaluate(self, cid: str, cand) -> None:
        """The GPU stage of one candidate, logged (its result replaces any earlier one on replay)."""
        info = self.stages.evaluate(cand)
        self._emit(EventKind.STAGE, f"{cid}: evaluate {info.verdict}", id=cid, stage="evaluate",
                   result=asdict(info))

    def _rescore(self, cid: str) -> None:
        """Score a candidate from its stages so far, logged."""
        score, kind = self._score(self.state.records[cid])
        self._emit(EventKind.STAGE, "", id=cid, stage="score", result={"score": score, "kind": kind.value if kind else None})

    def _measure_deferred(self) -> None:
        """On a machine with a GPU, evaluate the drafts that a run without one compiled for every
        arch but could not check or time (`deferred`), and score them again by measured time:
        drafting and compiling can happen on any machine, GPU time goes to measuring alone. The
        new evaluate and score events replace the old ones on replay; the run then comes to its
        end again (`_finish`), so its best draft and its gates are decided on measured times."""
        from ..toolchain.candidate import load_candidate

        ids = self.state.deferred()
        if not ids:
            return
        missing = [cid for cid in ids if not (paths.kernels_dir() / self.cfg.op / cid / "kernel.py").is_file()]
        if missing:
            raise UserError(f"run {self.log.folder.name} has drafts to measure that are not on this machine: "
                            f"{', '.join(missing)}; copy kernels_generated/{self.cfg.op}/<id>/ of each from the "
                            "machine that drafted them, then resume again")
        self.listener(f"measuring {len(ids)} drafts compiled without a GPU: {', '.join(ids)}", self.state)
        for n, cid in enumerate(ids):
            if self.budget.time_up():
                left = ids[n:]
                self._emit(EventKind.STOPPED, f"stopped: {StopReason.TIME.value}; not measured: {', '.join(left)} "
                           f"({self._resume_command()})",
                           reason=StopReason.TIME.value, not_evaluated=left)
                return
            self._evaluate(cid, load_candidate(self.cfg.op, cid))
            self._rescore(cid)

    def _resume_command(self) -> str:
        return f"harness optimize --op {self.cfg.op} --resume {self.log.folder.name}"

    def compile_workers(self) -> int:
        """Compiles the stage runs at once: --config's compile_workers, else the toolchain's
        default (HARNESS_COMPILE_JOBS, or one per core up to 8)."""
        from ..toolchain.compile import default_jobs

        return max(1, self.cfg.compile_workers or default_jobs())

    def _score(self, rec: CandidateRecord) -> tuple[float | None, ScoreKind | None]:
        """Lower is better. Measured geomean time if verified; compile proxy if the GPU
        stage could not run; None (a failure) otherwise."""
        if not rec.static_ok or not rec.compiled_everywhere:
            return None, None
        ev = rec.evaluate
        if ev is not None and ev.status is StageStatus.OK and ev.timings:
            return geomean([t.kernel_us for t in ev.timings]), ScoreKind.TIME_US
        if ev is None or ev.status is StageStatus.NOT_RUN:
            cs = list(rec.compile.values())
            return compile_proxy([c.registers for c in cs], [c.spill_bytes for c in cs],
                                 [c.ld128 for c in cs]), ScoreKind.COMPILE_PROXY
        return None, None

    # ---- the end ---------------------------------------------------------------------
    def _finish(self, again: bool = False) -> None:
        if again:
            if self.state.gates is not None and not self.state.gates.get("ran"):
                # decided anew (the newest GATES / PROMOTED events are the ones a replay keeps)
                self.state.gates = None
                if self.state.promoted is not None and not self.state.promoted.get("ok"):
                    self.state.promoted = None
        best = self.state.best_verified()
        if self.state.gates is None:
            if best is None:
                why = ("no candidate was verified on a GPU (GPU stages not run on this machine)"
                       if not self.stages.has_gpu else "no candidate passed evaluation")
                if (n := len(self.state.deferred())) and not self.stages.has_gpu:
                    why += f"; on a machine with a GPU, `{self._resume_command()}` measures the {n} compiled drafts"
                self._emit(EventKind.GATES, f"gates not run: {why}", candidate=None, ran=False, reason=why)
            elif not self.cfg.run_gates:
                self._emit(EventKind.GATES, "gates skipped", candidate=best.id, ran=False, reason="disabled")
            elif (slower := _below_the_perf_bar(best)) is not None:
                # the perf gate would refuse it: no GPU minutes spent on gates it will not pass
                why = f"{slower}; gate it anyway: {gate_by_hand(self.cfg.op, best.id)}"
                if (hint := self._narrow_hint(best)) is not None:
                    why += (f"; it reaches the margin on part of its scope ({hint['geomean']:.3f}x at "
                            f"{hint['points']} search points): gate that part with `{hint['command']}`")
                self._emit(EventKind.GATES, f"gates not run: {why}", candidate=best.id, ran=False, reason=why)
            elif (spent := self.budget.exhausted()) is not None:
                # the full gates take minutes on a GPU: never started past --time-limit (or a spent budget)
                why = f"{spent.value}; gate it later: {gate_by_hand(self.cfg.op, best.id)}"
                self._emit(EventKind.GATES, f"gates not run: {why}", candidate=best.id, ran=False, reason=why)
            else:
                self.listener(f"running the full gates for {best.id}", self.state)
                try:
                    from .gating import run_full_gates

                    res = run_full_gates(self.cfg.op, best.id)
                    self._emit(EventKind.GATES, f"gates: {'PASS' if res['passed'] else 'not passed'}", ran=True, **res)
                except (ImportError, UserError, OSError, ValueError) as exc:
                    self._emit(EventKind.GATES, f"gates failed to run: {exc}", candidate=best.id, ran=False,
                               reason=f"{type(exc).__name__}: {exc}"[:500])
        g = self.state.gates or {}
        if self.cfg.promote and self.state.promoted is None and not g.get("ran"):
            self._emit(EventKind.PROMOTED, "promotion refused: gates not run", ok=False, candidate=g.get("candidate"),
                       reason=f"gates not run: {g.get('reason')}"[:500])
        elif self.cfg.promote and self.state.promoted is None:
            from .gating import promote

            try:                  # harness.promotion re-checks the evidence: it decides, not `passed`
                self._emit(EventKind.PROMOTED, f"promoted {g['candidate']}", ok=True, **promote(self.cfg.op, g["candidate"]))
            except UserError as exc:
                self._emit(EventKind.PROMOTED, f"promotion refused: {exc}", ok=False, candidate=g["candidate"],
                           reason=str(exc)[:500])
        self._emit(EventKind.RUN_FINISHED, "run finished", summary=self.summary())

    def _narrow_hint(self, best) -> dict[str, Any] | None:
        """Where the best draft beat what runs today (the promoted kernel, else the reference) by the
        perf gate's margin when it did not over all its points (narrow_hint.py): the `harness
        narrow` command to gate it there. Worked out once per candidate (the gates' decision and
        the summary both ask)."""
        from ..toolchain.candidate import load_candidate
        from .narrow_hint import narrow_hint

        if best.id not in self._hints:
            try:
                lo_hi = load_candidate(self.cfg.op, best.id).scope.batch
            except UserError:
                self._hints[best.id] = None
            else:
                hint = narrow_hint(best.evaluate.timings, lo_hi, _perf_bar())
                self._hints[best.id] = hint.to_json(self.cfg.op, best.id) if hint else None
        return self._hints[best.id]

    def summary(self) -> dict[str, Any]:
        st = self.state
        ranked = st.ranked()
        best = ranked[0] if ranked else None
        n_drafted = len(st.drafts)
        compiled = sum(1 for r in st.records.values() if r.compiled_everywhere)
        verified = sum(1 for r in st.records.values() if r.verified)
        speed = None
        if best is not None and best.score_kind is ScoreKind.TIME_US and best.evaluate:
            ts = best.evaluate.timings
            ref = [t.reference_us / t.kernel_us for t in ts if t.reference_us]
            comp = [t.compiled_us / t.kernel_us for t in ts if t.compiled_us]
            # vs_promoted: the op's promoted kernel timed in the same A B B A run (None when the op
            # has none, or the best is it, or it does not cover every point); vs_today: what runs
            # each point today (that kernel, else the reference), the perf gate's incumbent. The
            # gate decides on the whole scope, not these points
            vs = best.evaluate.vs_promoted()
            today = best.evaluate.vs_today()
            speed = {"vs_reference_geomean": geomean(ref) if ref else None,
                     "vs_torch_compile_geomean": geomean(comp) if comp else None,
                     "vs_promoted_geomean": vs,
                     "promoted": best.evaluate.incumbent if vs is not None else None,
                     "vs_today_geomean": today,
                     "today": best.evaluate.today_label() if today is not None else None,
                     "narrow_hint": self._narrow_hint(best) if today is not None else None}
        return {
            "run_id": self.log.folder.name, "op": self.cfg.op, "agent": self.cfg.agent,
            "gpu_available": self.stages.has_gpu,
            "gpu_stages": "run" if self.stages.has_gpu else "not run (no CUDA GPU on this machine)",
            "ranking": "measured time" if best and best.score_kind is ScoreKind.TIME_US else
                       "compile feedback only (registers, spills, 128-bit loads)",
            "rounds_finished": len(st.rounds_finished), "rounds_planned": self.cfg.rounds,
            "candidates": len(st.records), "slots_drafted": n_drafted, "slots_failed": len(st.failed_slots),
            "compiled_all_archs": compiled, "verified": verified,
            "best": None if best is None else {"id": best.id, "score": best.score,
                                               "score_kind": best.score_kind.value if best.score_kind else None,
                                               "summary": best.summary(), "family": best.family,
                                               "params": best.params},
            "speedup": speed, "llm_calls": st.llm_calls, "tokens": st.tokens,
            "cost_usd": round(st.cost_usd, 4), "stopped": st.stopped,
            # compiled for every arch, never checked on the GPU (a --time-limit stop): --resume runs them
            "not_evaluated": st.unscored(),
            # compiled for every arch on a machine without a GPU: --resume on one measures them
            "not_measured": st.deferred(),
            "gates": st.gates, "promoted": st.promoted,
            "candidates_table": [
                {"id": r.id, "round": r.round, "slot": r.slot, "author": r.author, "summary": r.summary(),
                 "score": r.score, "score_kind": r.score_kind.value if r.score_kind else None,
                 "compile": {a: c.status.value for a, c in r.compile.items()},
                 "evaluate": r.evaluate.verdict if r.evaluate else None}
                for r in sorted(st.records.values(), key=lambda c: (c.round, c.slot))],
        }

    def write_summary(self) -> None:
        self.log.write_json("summary.json", self.summary())
        for rec in self.state.records.values():
            self.log.write_json(f"candidates/{rec.id}.json", rec.to_json())


def promoted_proposal(op: str, families) -> tuple[Any, str] | None:
    """(Proposal, id) of the op's promoted kernel when it is a render of one of `families` at a
    point of its space (provenance.template), else None: the template search starts around it."""
    from .search import Proposal

    inc = promoted_candidate(op)
    tpl = inc.provenance.template if inc is not None else None
    if inc is None or not tpl:
        return None
    fam = next((f for f in families if f.name == tpl.get("family")), None)
    if fam is None or not isinstance(tpl.get("params"), dict) or not fam.feasible(tpl["params"]):
        return None
    return Proposal(fam.name, dict(fam.complete(tpl["params"]))), inc.id


def gate_by_hand(op: str, cid: str) -> str:
    """The command that gates the run's best draft when the loop did not. `harness gate` judges
    isolation on the working tree, where the run's other drafts lie untracked beside this one and
    each fails it ("change outside the candidate folder"); the loop's own gating judges HEAD plus
    this folder alone (gating.isolation_as_pr). A run on the lent H200 (scripts/gpu/optimize_promote.sh)
    ends with the machine: land the draft, commit it and gate it with scripts/gpu/gate.sh instead."""
    return f"harness gate {op} {cid}, with the run's other untracked drafts moved out of kernels_generated/{op}/"


def _perf_bar() -> float:
    """The perf gate's geomean margin (gates/gate_config.toml perf_sweep.geomean_margin): the root's
    own config, which the gates read, else the package's."""
    from gates.config import config_path, load_config

    pinned = config_path(paths.root())
    return float(load_config(pinned if pinned.is_file() else None).get("perf_sweep", "geomean_margin"))


def _below_the_perf_bar(best: CandidateRecord) -> str | None:
    """Why the best draft would not pass the perf gate against what runs its points today (the
    promoted kernel covering each, else the reference: the gate's incumbent): its geomean speedup
    over that at the search points (all of them timed in the same run) is below the perf gate's bar
    (gates/gate_config.toml perf_sweep.geomean_margin, 1.05); None otherwise. The gate sweeps the
    whole scope, so this is the search's estimate; `harness gate` decides for real."""
    ev = best.evaluate
    g = ev.vs_today() if ev else None
    if ev is None or g is None:
        return None
    bar = _perf_bar()
    if g >= bar:
        return None
    if all(t.kernel_us > (t.today_us or 0.0) for t in ev.timings):        # vs_today: every point has one
        return (f"the best draft is slower than {ev.today_label()} at every search point "
                f"({g:.2f}x its speed, geomean)")
    return (f"the best draft is {g:.3f}x {ev.today_label()} at the search points (geomean), "
            f"below the perf gate's {bar:.2f}")


def start(cfg: OptimizeConfig, run_id: str | None = None, **kw: Any) -> Optimizer:
    log = RunLog.create(paths.runs_dir(), run_id or new_run_id(cfg.op))
    try:
        return Optimizer(cfg, log, **kw)
    except Exception:
        # refused before its first event (no key, no families, a bad provider): leave no empty
        # run folder behind, which `--resume` would call "no run" and the dashboard would list
        if not log.events_path.exists():
            shutil.rmtree(log.folder, ignore_errors=True)
        raise


def resume(run_id: str, overrides: dict[str, Any] | None = None, **kw: Any) -> Optimizer:
    try:
        log = RunLog.open(paths.runs_dir(), run_id)
    except (FileNotFoundError, ValueError) as exc:
        raise UserError(str(exc)) from None
    st = RunState.replay(log)
    if not st.config:
        raise UserError(f"run {run_id} has no run_started event")
    cfg = OptimizeConfig.from_json({**st.config, **(overrides or {})})
    return Optimizer(cfg, log, **kw)
