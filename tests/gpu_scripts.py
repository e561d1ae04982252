"""Import a scripts/gpu/*.py tool as a module in a test (those scripts import each other by bare name)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

GPU_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"


def gpu_script(name: str) -> ModuleType:
    """scripts/gpu/<name>.py, imported with scripts/gpu on sys.path for the import only."""
    sys.path.insert(0, str(GPU_SCRIPTS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(GPU_SCRIPTS))
