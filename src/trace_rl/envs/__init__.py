"""Agent environments with save points (DESIGN.md section 4): registry of make_env / load_tasks / gold_trajectory.

Names: "math_python", "math_steps", "bfcl", "multihop_qa", "kb_hops". Submodules are imported lazily so that importing this package
does not load reasoning-gym, bfcl-eval or bm25s.

A researcher's own environment is named ``"module:factory"`` (the contract of the verl adapter's ``env``): the module
is imported (it must be on ``sys.path``), ``factory(**kwargs)`` makes an env (called with ``max_turns=``; any object
with the `Env` protocol: reset, step, snapshot, restore), the same module's ``load_tasks(split, limit, seed,
**task_kwargs) -> list[Task]`` gives its tasks (splits "train" and "test"), and its optional
``gold_trajectory(task) -> list[str]`` the assistant turns of a solution (needed only by the SFT warm start).
docs/environments.md walks through one (tests/fixtures/user_env/my_pkg/my_env.py).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from trace_rl.envs.base import Env, StepResult, ToolCall, parse_turn
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAMES = ("math_python", "math_steps", "bfcl", "multihop_qa", "kb_hops")

# name -> (module, env class, task loader, gold trajectory function)
_REGISTRY: dict[str, tuple[str, str, str, str]] = {
    "math_python": ("trace_rl.envs.math_python", "MathPythonEnv", "load_math_tasks", "math_gold_trajectory"),
    "math_steps": ("trace_rl.envs.math_steps", "MathStepsEnv", "load_step_tasks", "steps_gold_trajectory"),
    "bfcl": ("trace_rl.envs.bfcl", "BfclEnv", "load_bfcl_tasks", "bfcl_gold_trajectory"),
    "multihop_qa": ("trace_rl.envs.multihop_qa", "MultihopQAEnv", "load_qa_tasks", "qa_gold_trajectory"),
    "kb_hops": ("trace_rl.envs.kb_hops", "KbHopsEnv", "load_kb_tasks", "kb_gold_trajectory"),
}


# what a "module:factory" environment's module provides, by registry index (1 is the factory itself)
USER_ENV_NAMES = {2: "load_tasks", 3: "gold_trajectory"}


def _entry(name: str, index: int) -> Any:
    if ":" in name:
        return _user_entry(name, index)
    if name not in _REGISTRY:
        raise DataError(_unknown(name))
    module = importlib.import_module(_REGISTRY[name][0])
    return getattr(module, _REGISTRY[name][index])


def _unknown(name: str) -> str:
    return f"unknown environment {name!r}; expected one of {', '.join(ENV_NAMES)}, or module:factory for your own"


def _user_entry(name: str, index: int) -> Any:
    """The factory (index 1), ``load_tasks`` (2) or ``gold_trajectory`` (3) of a "module:factory" environment."""
    module_name, _, factory = name.partition(":")
    if (
        not module_name
        or not factory.isidentifier()
        or not all(p.isidentifier() for p in module_name.split("."))
    ):
        raise DataError(f"environment {name!r}: expected module:factory, e.g. my_pkg.my_env:make")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise DataError(
            f"environment {name!r}: cannot import {module_name} ({exc}); is it on PYTHONPATH?"
        ) from None
    attr = factory if index == 1 else USER_ENV_NAMES[index]
    found = getattr(module, attr, None)
    if not callable(found):
        why = {
            1: "the env factory",
            2: "its task loader",
            3: "its gold trajectories (used by the SFT warm start)",
        }
        raise DataError(f"environment {name!r}: {module_name} defines no callable {attr} ({why[index]})")
    return found


def env_problem(name: str, *, gold: bool = False) -> str | None:
    """Why training cannot use environment ``name`` (one line), or None. A registry name is only looked up (its
    module is not imported); a "module:factory" name is imported and must provide its factory and ``load_tasks``
    (and ``gold_trajectory`` when ``gold``); nothing is called."""
    if ":" not in name:
        return None if name in _REGISTRY else _unknown(name)
    try:
        for index in (1, 2, 3) if gold else (1, 2):
            _entry(name, index)
    except ValueError as exc:
        return str(exc)
    return None


def env_kwargs_problem(name: str, kwargs: Mapping[str, Any]) -> str | None:
    """Why ``make_env(name, **kwargs)`` would refuse ``kwargs`` (one line), or None. Nothing is made: the factory's
    signature must take them, and an env class's ``check_settings(**kwargs)``, where it has one (multihop_qa's),
    must accept their values (without loading data or contacting a server).

    Raises:
        ValueError: ``name`` is not an environment (see `env_problem`).
    """
    factory = _entry(name, 1)
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError as exc:
        return f"{name} does not take {sorted(kwargs)} ({exc})"
    except ValueError:  # a builtin or C factory without a signature: make_env will tell
        return None
    check = getattr(factory, "check_settings", None)
    if callable(check):
        try:
            check(**kwargs)
        except (TypeError, ValueError) as exc:
            return f"{name}: {exc}"
    return None


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
    """Tasks of an environment. Splits: math_python train/test/eval; math_steps train/test/eval; bfcl train/test/all; multihop_qa train/test/all; kb_hops train/test/eval.

    Raises:
        ValueError: unknown name or split.
    """
    tasks: list[Task] = _entry(name, 2)(split=split, limit=limit, seed=seed, **kwargs)
    return tasks


def gold_trajectory(task: Task, env: str | None = None) -> list[str]:
    """Assistant turn texts of a gold solution; stepping them through the env gives reward 1.

    ``env``: the environment name the task was loaded with (default ``task.env``; a "module:factory"
    environment's tasks may carry a shorter name of their own).
    """
    turns: list[str] = _entry(task.env if env is None else env, 3)(task)
    return turns


__all__ = [
    "ENV_NAMES",
    "Env",
    "StepResult",
    "Task",
    "ToolCall",
    "env_kwargs_problem",
    "env_problem",
    "gold_trajectory",
    "load_tasks",
    "make_env",
    "parse_turn",
]
