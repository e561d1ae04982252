"""The two kinds of drafting agent.

TemplateAgent renders kernel-family points chosen by the halving search (no network).
LLMAgent asks a provider for a whole kernel.py, feeding back the parent's results, and
retries malformed replies; every prompt and reply is stored in the run folder.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .extract import extract_kernel
from .families import Family
from .prompting import feedback_prompt, malformed_prompt, prompt_hash
from .providers import Message, Provider, ProviderError
from .runlog import EventKind, RunLog
from .search import HalvingSearch, Proposal


@dataclass
class Draft:
    round: int
    slot: int
    author: str
    source: str | None                 # None: the slot produced no kernel
    prompt_hash: str | None = None
    parent: str | None = None
    template: dict[str, Any] | None = None
    scope: dict[str, Any] = field(default_factory=dict)   # narrowing from a family, else empty
    error: str = ""
    files: list[str] = field(default_factory=list)         # prompt/reply files under the run


class TemplateAgent:
    author = "template"

    def __init__(self, families: list[Family], seed: int = 0, around: tuple[Proposal, ...] = ()):
        self.families = {f.name: f for f in families}
        self.search = HalvingSearch(families, seed)
        self.around = around              # the promoted kernel's point, when it is one of these families'

    def plan(self, round_no: int, k: int, scores: dict[str, float]) -> list[Proposal]:
        return self.search.propose(k, scores, round_no, self.around)

    def draft(self, round_no: int, slot: int, proposal: Proposal) -> Draft:
        fam = self.families[proposal.family]
        tpl = fam.template_path.read_text()
        # the "prompt" of a template candidate is its template and its parameters
        h = hashlib.sha256((tpl + "\0" + json.dumps(proposal.params, sort_keys=True)).encode()).hexdigest()
        try:
            src = fam.render(proposal.params)
        except Exception as exc:  # a family that fails to render is a broken family, not a crash
            return Draft(round_no, slot, self.author, None, h, error=f"render failed: {exc}")
        return Draft(round_no, slot, self.author, src, h, None,
                     {"family": fam.name, "params": dict(proposal.params)}, dict(fam.scope))


@dataclass
class ParentContext:
    """What an LLM refines: a previous candidate's reply and its results, as feedback."""

    id: str
    reply: str
    feedback: str


class LLMAgent:
    def __init__(self, provider: Provider, log: RunLog, system: str, max_reply_attempts: int = 3,
                 max_tokens: int = 8192):
        self.provider = provider
        self.log = log
        self.system = system
        self.max_reply_attempts = max_reply_attempts
        self.max_tokens = max_tokens

    @property
    def author(self) -> str:
        return self.provider.author

    def draft(self, round_no: int, slot: int, draft_text: str, parent: ParentContext | None) -> Draft:
        """One slot: ask, take the code from a fenced block, re-ask on a malformed reply."""
        messages = [Message("user", draft_text)]
        if parent is not None:
            messages += [Message("assistant", parent.reply), Message("user", parent.feedback)]
        files: list[str] = []
        last_err = ""
        for attempt in range(1, self.max_reply_attempts + 1):
            stem = f"r{round_no:02d}-s{slot:02d}-a{attempt}"
            h = prompt_hash(self.system, messages)
            files.append(str(self.log.write_text("prompts", f"{stem}.md", _dump(self.system, messages)).name))
            try:
                comp = self.provider.complete(self.system, messages, self.max_tokens)
            except ProviderError as exc:
                return Draft(round_no, slot, self.author, None, h, parent.id if parent else None,
                             error=f"provider: {exc}", files=files)
            files.append(str(self.log.write_text("replies", f"{stem}.md", comp.text).name))
            ext = extract_kernel(comp.text)
            if ext.ok:
                return Draft(round_no, slot, self.author, ext.code, h, parent.id if parent else None,
                             files=files)
            last_err = f"{ext.problem.value if ext.problem else 'malformed'}: {ext.detail}"
            self.log.append(EventKind.DRAFT_FAILED, round=round_no, slot=slot, attempt=attempt,
                            reason=last_err, final=False)
            messages = messages + [Message("assistant", comp.text), Message("user", malformed_prompt(ext.detail))]
        return Draft(round_no, slot, self.author, None, None, parent.id if parent else None,
                     error=f"malformed reply after {self.max_reply_attempts} attempts ({last_err})", files=files)


def _dump(system: str, messages: list[Message]) -> str:
    parts = [f"<!-- system -->\n{system}"] + [f"<!-- {m.role} -->\n{m.content}" for m in messages]
    return "\n\n".join(parts)


__all__ = ["Draft", "TemplateAgent", "LLMAgent", "ParentContext", "feedback_prompt"]
