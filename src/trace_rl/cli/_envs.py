"""Environment names for the CLI: the envs package's registry, plus the rollout package's toy env."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trace_rl.cli.common import UsageError


@dataclass(frozen=True)
class EnvEntry:
    """An environment as the CLI sees it: its task loader, env factory and gold trajectories."""

    make: Callable[..., Any]
    load_tasks: Callable[..., list[Any]]
    gold_trajectory: Callable[[Any], list[str]]


def resolve_env(name: str) -> EnvEntry:
    """The env factory, task loader and gold trajectories of environment `name`."""
    from trace_rl.rollout import toy_env

    if name == toy_env.ENV_NAME:
        return EnvEntry(
            lambda **kw: toy_env.make_env(name, **kw),
            lambda split, limit, seed: toy_env.load_tasks(split, limit, seed),
            toy_env.gold_trajectory,
        )
    try:
        from trace_rl import envs
    except ImportError as exc:
        raise UsageError(f"unknown environment {name!r} (the envs package is not installed)") from exc
    return EnvEntry(
        lambda **kw: envs.make_env(name, **kw),
        lambda split, limit, seed: envs.load_tasks(name, split, limit, seed),
        lambda task: envs.gold_trajectory(task, name),  # a module:factory env's tasks may carry another name
    )
