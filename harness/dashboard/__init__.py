"""The reviewer dashboard: a static site of every op, candidate, gate result, agent run and
promotion, built from the folder layout (kernels_generated/, runs/, git) and served locally.

    build(root, out_dir) -> BuildResult        collect + render, offline, self-contained
    collect(root) -> SiteData                  the typed views (model.py)
"""
from __future__ import annotations

from pathlib import Path

from .collect import collect
from .model import SiteData
from .render import BuildResult, render_site


def build(root: Path, out_dir: Path, live: bool = False) -> BuildResult:
    return render_site(collect(root), out_dir, live=live)


__all__ = ["BuildResult", "SiteData", "build", "collect"]
