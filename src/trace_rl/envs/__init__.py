"""Agent environments with save points (DESIGN.md section 4): registry of make_env / load_tasks / gold_trajectory.

Names: "math_python", "math_steps", "bfcl", "multihop_qa". Submodules are imported lazily so that importing this package
does not load reasoning-gym, bfcl-eval or bm25s.
"""

from __future__ import annotations

import importlib
from typing import Any

from trace_rl.envs.base import Env, StepResult, ToolCall, parse_turn
from trace_rl.types import Task

ENV_NAMES = ("math_python", "math_steps", "bfcl", "multihop_qa")

# name -> (module, env class, task loader, gold trajectory function)
_REGISTRY: dict[str, tuple[str, str, str, str]] = {
    "math_python": ("trace_rl.envs.math_python", "MathPythonEnv", "load_math_tasks", "math_gold_trajectory"),
    "math_steps": ("trace_rl.envs.math_steps", "MathStepsEnv", "load_step_tasks", "steps_gold_trajectory"),
    "bfcl": ("trace_rl.envs.bfcl", "BfclEnv", "load_bfcl_tasks", "bfcl_gold_trajectory"),
    "multihop_qa": ("trace_rl.envs.multihop_qa", "MultihopQAEnv", "load_qa_tasks", "qa_gold_trajectory"),
}


def _entry(name: str, index: int) -> Any:
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(ENV_NAMES)}")
    module = importlib.import_module(_REGISTRY[name][0])
    return getattr(module, _REGISTRY[name][index])


def make_env(name: str, **kwargs: Any) -> Env:
    """A fresh environment instance. kwargs go to the env class (for example ``max_turns``).

    Raises:
        ValueError: unknown name or bad kwargs values.
    """
    env: Env = _entry(name, 1)(**kwargs)
    return env


def load_tasks(
    name: str, split: str = "train", limit: int | None = None, seed: int = 0, **kwargs: Any
) -> list[Task]:
    """Tasks of an environment. Splits: math_python train/test/eval; math_steps train/test/eval; bfcl train/test/all; multihop_qa train/test/all.

    Raises:
        ValueError: unknown name or split.
    """
    tasks: list[Task] = _entry(name, 2)(split=split, limit=limit, seed=seed, **kwargs)
    return tasks


def gold_trajectory(task: Task) -> list[str]:
    """Assistant turn texts of a gold solution; stepping them through the env gives reward 1."""
    turns: list[str] = _entry(task.env, 3)(task)
    return turns


__all__ = [
    "ENV_NAMES",
    "Env",
    "StepResult",
    "Task",
    "ToolCall",
    "gold_trajectory",
    "load_tasks",
    "make_env",
    "parse_turn",
]
