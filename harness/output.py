"""Printing helpers shared by the CLI verbs: JSON for machines, rich tables for people."""
from __future__ import annotations

import dataclasses
import enum
import json
import sys
from pathlib import Path
from typing import Any


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and obj != obj:
        return None
    return obj


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2, sort_keys=False) + "\n")


def console():
    """A rich console; when stdout is not a terminal (pipes, CI logs) tables get 160
    columns instead of rich's 80, so they are not folded into unreadable cells."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)
