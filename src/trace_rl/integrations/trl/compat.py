"""The TRL seam: every TRL name the adapter imports that is not TRL's stable public API, in one module, behind a
version check.

TRL 1.16 (the tested release) ships ``AsyncGRPOTrainer`` as an experimental trainer under
``trl.experimental.async_grpo``; TRL 1.18 made it a stable trainer and removed those submodules. So the names the
adapter needs from it (the trainer module it patches for CPU runs, ``RolloutSample``, the tree-attention name)
are found through the trainer class itself: `async_grpo_trainer_module` prefers the stable ``trl.AsyncGRPOTrainer``
and falls back to the experimental path, then reads the names from the module that defines the trainer (where
TRL imports them). Every lookup first checks ``trl.__version__`` against `TRL_RANGE`, and a name that is not
found raises `UnsupportedVersionError` naming the supported and tested releases in one line, never an
ImportError from deep inside TRL. ``trl.GRPOTrainer`` (the ``rollout_func`` path) is stable API and imported by
users directly.
"""

from __future__ import annotations

import functools
import importlib
import sys
from types import ModuleType
from typing import Any

from trace_rl.integrations.versions import UnsupportedVersionError, VersionRange

TRL_VERSION = "1.16.0"  # the TRL release this adapter is written and tested against (pyproject `trl` extra)
TRL_RANGE = VersionRange(
    "trl",
    minimum=(1, 16, 0),
    below=(2, 0, 0),
    tested=TRL_VERSION,
    why_minimum="GRPOTrainer's rollout_func and AsyncGRPOTrainer's rollout_worker seams",
)
"""TRL releases the adapter supports (1.16 up to 2.0; others than the tested 1.16.0 with a warning)."""

EXPERIMENTAL_ASYNC_GRPO = "trl.experimental.async_grpo"
"""Where TRL before 1.18 keeps ``AsyncGRPOTrainer`` (and ``AsyncGRPOConfig``)."""


def trl_module() -> ModuleType:
    """``trl``, imported and its version checked against `TRL_RANGE` (one warning line for an untested one).

    Raises:
        UnsupportedVersionError: TRL is not installed, or its release is outside `TRL_RANGE`.
    """
    try:
        trl = importlib.import_module("trl")
    except ImportError as exc:
        raise UnsupportedVersionError(
            f"TRL is not installed ({TRL_RANGE.describe()}); `make trl` builds .venv-trl with it"
        ) from exc
    _check(str(getattr(trl, "__version__", "unknown")))
    return trl


@functools.lru_cache(maxsize=8)
def _check(version: str) -> None:
    TRL_RANGE.check(version)  # once per version: the warning is one line per process


def async_grpo_classes() -> tuple[type, type]:
    """(``AsyncGRPOTrainer``, ``AsyncGRPOConfig``): the stable ``trl.AsyncGRPOTrainer`` where TRL has one (1.18
    and later), else the experimental ``trl.experimental.async_grpo`` ones.

    Raises:
        UnsupportedVersionError: neither path has them (the message names the supported and tested releases).
    """
    trl = trl_module()
    version = str(getattr(trl, "__version__", "unknown"))
    try:
        return trl.AsyncGRPOTrainer, trl.AsyncGRPOConfig
    except (AttributeError, ImportError):
        pass  # TRL < 1.18: only the experimental path
    try:
        module = importlib.import_module(EXPERIMENTAL_ASYNC_GRPO)
        return module.AsyncGRPOTrainer, module.AsyncGRPOConfig
    except (AttributeError, ImportError) as exc:
        raise TRL_RANGE.moved(version, "AsyncGRPOTrainer (stable or experimental)", exc) from exc


def async_grpo_trainer_module() -> ModuleType:
    """The module that defines TRL's ``AsyncGRPOTrainer`` (the one `trace_rl.integrations.trl.cpu` patches)."""
    trainer, _ = async_grpo_classes()
    return sys.modules[trainer.__module__]


def _from_trainer_module(name: str) -> Any:
    module = async_grpo_trainer_module()
    try:
        return getattr(module, name)
    except AttributeError as exc:
        version = str(getattr(sys.modules.get("trl"), "__version__", "unknown"))
        raise TRL_RANGE.moved(version, f"{module.__name__}.{name}", exc) from exc


def rollout_sample_class() -> type:
    """TRL's ``RolloutSample`` (what a rollout worker pushes to ``AsyncGRPOTrainer``)."""
    cls: type = _from_trainer_module("RolloutSample")
    return cls


def tree_attention_name() -> str:
    """The attention-implementation name ``AsyncGRPOTrainer`` loads its model with (``"tree_fa3"`` in TRL 1.16)."""
    return str(_from_trainer_module("TREE_ATTENTION"))


def require_trainer_names(*names: str) -> ModuleType:
    """The trainer module, after checking it defines every one of ``names`` (the names `cpu` patches).

    Raises:
        UnsupportedVersionError: one is missing.
    """
    module = async_grpo_trainer_module()
    for name in names:
        _from_trainer_module(name)
    return module


__all__ = [
    "EXPERIMENTAL_ASYNC_GRPO",
    "TRL_RANGE",
    "TRL_VERSION",
    "UnsupportedVersionError",
    "async_grpo_classes",
    "async_grpo_trainer_module",
    "require_trainer_names",
    "rollout_sample_class",
    "tree_attention_name",
    "trl_module",
]
