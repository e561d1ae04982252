"""Import a scripts/*.py or scripts/gpu/*.py tool as a module in a test (the gpu scripts import each
other by bare name)."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
GPU_SCRIPTS = SCRIPTS / "gpu"


def _import_from(folder: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)       # registered in sys.modules: dataclasses find it
    finally:
        sys.path.remove(str(folder))


def gpu_script(name: str) -> ModuleType:
    """scripts/gpu/<name>.py, imported with scripts/gpu on sys.path for the import only."""
    return _import_from(GPU_SCRIPTS, name)


def tool_script(name: str) -> ModuleType:
    """scripts/<name>.py (the CPU tools), imported the same way."""
    return _import_from(SCRIPTS, name)
