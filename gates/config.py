"""The frozen gate configuration: gates/gate_config.toml, every threshold with its reason."""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).resolve().parent / "gate_config.toml"


@dataclass(frozen=True)
class GateConfig:
    version: int
    values: dict[str, dict[str, Any]]      # section -> name -> value
    reasons: dict[str, dict[str, str]]     # section -> name -> reason
    sha256: str                            # of the file's bytes, pinned by evidence

    def get(self, section: str, name: str) -> Any:
        try:
            return self.values[section][name]
        except KeyError:
            raise KeyError(f"gate config has no {section}.{name}") from None

    @classmethod
    def from_bytes(cls, raw: bytes) -> "GateConfig":
        data = tomllib.loads(raw.decode())
        version = data.pop("version", None)
        if not isinstance(version, int):
            raise ValueError("gate config needs an integer 'version'")
        values: dict[str, dict[str, Any]] = {}
        reasons: dict[str, dict[str, str]] = {}
        for section, entries in data.items():
            if not isinstance(entries, dict):
                raise ValueError(f"gate config: '{section}' must be a table")
            values[section], reasons[section] = {}, {}
            for name, entry in entries.items():
                if not (isinstance(entry, dict) and "value" in entry and str(entry.get("reason", "")).strip()):
                    raise ValueError(f"gate config: {section}.{name} needs value and a non-empty reason")
                values[section][name] = entry["value"]
                reasons[section][name] = entry["reason"]
        return cls(version, values, reasons, hashlib.sha256(raw).hexdigest())


def load_config(path: Path | None = None) -> GateConfig:
    return GateConfig.from_bytes((path or DEFAULT_PATH).read_bytes())


def config_path(root: Path) -> Path:
    """The config a repository root pins (gates/gate_config.toml inside it)."""
    return root / "gates" / "gate_config.toml"
