"""Shared pieces of the TRL tests: parity tasks (a fair coin per rollout for a random policy, so trees hold both
outcomes; the env is the verl tests' `ParityEnv`) and the tiny policy."""

from __future__ import annotations

from tests.verl.parity_env import ParityEnv
from trace_rl.types import Task

TURNS = 2  # every rollout has one anchor (the prefix after turn 1)


def parity_tasks(n: int) -> list[Task]:
    return [
        Task(id=f"p{i}", env="parity", prompt=f"Say something of odd length, number {i}.") for i in range(n)
    ]


def parity_env() -> ParityEnv:
    return ParityEnv(max_turns=TURNS)
