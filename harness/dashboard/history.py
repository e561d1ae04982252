"""Promotion history from git: the promote/<op>/<id> and demote/<op>/<id> branches written by
harness/promotion.py, and the commits on HEAD that changed kernels_generated/promoted.json.
Without gitpython or outside a git checkout the history is empty, with a note saying why."""
from __future__ import annotations

from pathlib import Path

from .model import PromotionEvent

MANIFEST_REL = "kernels_generated/promoted.json"
MAX_MANIFEST_COMMITS = 200


def promotion_history(root: Path) -> tuple[list[PromotionEvent], str]:
    """Newest first, and a note when history could not be read."""
    try:
        import git
    except ImportError:
        return [], "gitpython is not installed: no promotion history"
    try:
        repo = git.Repo(root)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return [], f"{root} is not a git checkout: no promotion history"
    events: dict[str, PromotionEvent] = {}
    try:
        for head in repo.heads:
            name = head.name
            if name.startswith(("promote/", "demote/")):
                c = head.commit
                events[c.hexsha] = _event(c, name)
        if repo.head.is_valid():
            for c in repo.iter_commits("HEAD", paths=MANIFEST_REL, max_count=MAX_MANIFEST_COMMITS):
                events.setdefault(c.hexsha, _event(c, ""))
    except (git.GitCommandError, ValueError) as exc:
        return sorted(events.values(), key=lambda e: e.date_utc, reverse=True), f"git history incomplete: {exc}"
    return sorted(events.values(), key=lambda e: e.date_utc, reverse=True), ""


def _event(c, branch: str) -> PromotionEvent:
    """A promotion commit's subject is "promote <op>/<id>" or "demote <op>/<id>"."""
    from datetime import timezone

    subject = c.message.splitlines()[0] if c.message else ""
    action, _, target = subject.partition(" ")
    op, _, cid = target.partition("/")
    if action not in ("promote", "demote") or not cid:
        action, op, cid = "manifest", "", ""
    return PromotionEvent(action=action, op=op, candidate=cid.strip(), branch=branch, commit=c.hexsha,
                          date_utc=c.committed_datetime.astimezone(timezone.utc).isoformat(timespec="seconds"),
                          author=str(c.author.name), message=c.message.strip())
