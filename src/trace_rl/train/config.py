"""Loading a training config: the defaults, then a preset or a YAML file, then overrides, validated.

A config is built from (1) the dataclass defaults (`trace_rl.train.config_sections`), (2) a preset (configs/<name>.yaml shipped inside the
package) or a user YAML file, (3) command-line overrides ``section.key=value``. Unknown keys and bad values
raise `ConfigError` with one line naming the key, e.g. ``budget.roots: must be a multiple of budget.group_size``.
The sections, `ConfigError`, `validate`, `budget_shape` and `estimator_for` are re-exported: import them from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trace_rl.train.config_check import budget_shape, estimator_for, validate
from trace_rl.train.config_parse import ConfigError, build, merge, parse_override, read_yaml
from trace_rl.train.config_sections import (
    BackendSection,
    BudgetSection,
    EnvSection,
    OptimSection,
    PolicySection,
    PredictorSection,
    SamplingSection,
    TrainConfig,
)

PRESET_DIR = Path(__file__).resolve().parent / "presets"


def preset_names() -> list[str]:
    """Names of the shipped presets (YAML files in trace_rl/train/presets)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(
    *, preset: str | None = None, file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """Build and validate a TrainConfig from a preset or a YAML file plus ``section.key=value`` overrides.

    Raises:
        ConfigError: unknown preset/file, unknown key, wrong type or an invalid combination (one line).
    """
    if preset is not None and file is not None:
        raise ConfigError("give either a preset or a config file, not both")
    data: dict[str, Any] = {}
    if preset is not None:
        path = PRESET_DIR / f"{preset}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(preset_names())})")
        data = read_yaml(path)
        data.setdefault("preset", preset)
    elif file is not None:
        path = Path(file)
        if not path.exists():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        data = read_yaml(path)
    for item in overrides:
        data = merge(data, parse_override(item))
    cfg = build(TrainConfig, data, "")
    validate(cfg)
    return cfg


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a config saved with `TrainConfig.to_dict` (used by --resume)."""
    cfg = build(TrainConfig, data, "")
    validate(cfg)
    return cfg


def with_overrides(cfg: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """``cfg`` with ``section.key=value`` overrides applied (the same parser as `load_config`), validated.

    Raises:
        ConfigError: a malformed override, an unknown key, a wrong type or an invalid combination.
    """
    data = cfg.to_dict()
    for item in overrides:
        data = merge(data, parse_override(item))
    return config_from_dict(data)


__all__ = [
    "PRESET_DIR",
    "BackendSection",
    "BudgetSection",
    "ConfigError",
    "EnvSection",
    "OptimSection",
    "PolicySection",
    "PredictorSection",
    "SamplingSection",
    "TrainConfig",
    "budget_shape",
    "config_from_dict",
    "estimator_for",
    "load_config",
    "preset_names",
    "validate",
    "with_overrides",
]
