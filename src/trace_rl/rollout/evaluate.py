"""Success spread of a policy on a set of tasks: the share of prompts whose samples are mixed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_rl.rollout.agent import ChatCodec, EnvLike, run_episode
from trace_rl.rollout.backends import GenerationBackend, SamplingParams
from trace_rl.types import Task


def spread_metrics(rewards: np.ndarray) -> dict[str, float]:
    """Metrics of a (prompts, samples) reward matrix with binary rewards (success = reward >= 0.5).

    Returns mean_success, mixed_share (some but not all samples succeed), all_solved_share,
    all_failed_share; the three shares sum to 1.

    Raises:
        ValueError: not a 2-D array with at least one prompt and one sample.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] == 0 or r.shape[1] == 0:
        raise ValueError(f"rewards must have shape (prompts >= 1, samples >= 1), got {r.shape}")
    wins = (r >= 0.5).sum(axis=1)
    n = r.shape[1]
    return {
        "mean_success": float((r >= 0.5).mean()),
        "mixed_share": float(((wins > 0) & (wins < n)).mean()),
        "all_solved_share": float((wins == n).mean()),
        "all_failed_share": float((wins == 0).mean()),
    }


async def sample_rewards(
    backend: GenerationBackend,
    env_factory: Callable[[], EnvLike],
    codec: ChatCodec,
    tasks: Sequence[Task],
    sampling: SamplingParams,
    *,
    samples: int = 8,
    max_turns: int = 8,
    seed: int = 0,
) -> np.ndarray:
    """Rewards (len(tasks), samples) of `samples` independent episodes per task, all run concurrently."""
    episodes = await sample_episodes(
        backend, env_factory, codec, tasks, sampling, samples=samples, max_turns=max_turns, seed=seed
    )
    return np.asarray([e.reward for e in episodes], np.float64).reshape(len(tasks), samples)


async def sample_episodes(
    backend: GenerationBackend,
    env_factory: Callable[[], EnvLike],
    codec: ChatCodec,
    tasks: Sequence[Task],
    sampling: SamplingParams,
    *,
    samples: int = 8,
    max_turns: int = 8,
    seed: int = 0,
) -> list[Any]:
    """The episodes behind `sample_rewards` (task-major: ``samples`` per task, in task order), for callers that
    also count what they cost (sampled tokens, tool calls).

    Raises:
        ValueError: samples < 1.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    coros = [
        run_episode(
            backend, env_factory(), codec, task, sampling, max_turns=max_turns, seed=seed + 1_000 * i + j
        )
        for i, task in enumerate(tasks)
        for j in range(samples)
    ]
    return list(await asyncio.gather(*coros))


def success_spread(
    backend: Any,
    env_factory: Callable[[], EnvLike],
    codec: ChatCodec,
    tasks: Sequence[Task],
    sampling: SamplingParams,
    *,
    samples: int = 8,
    max_turns: int = 8,
    seed: int = 0,
) -> dict[str, float]:
    """`spread_metrics` of `sample_rewards` (synchronous wrapper)."""
    rewards = asyncio.run(
        sample_rewards(
            backend, env_factory, codec, tasks, sampling, samples=samples, max_turns=max_turns, seed=seed
        )
    )
    return spread_metrics(rewards)
