"""The periodic held-out evaluation of a run: pass@1 on a fixed test split, one "eval" record per call."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_rl.train.config import TrainConfig


def evaluate_held_out(
    cfg: TrainConfig,
    backend: Any,
    env_factory: Callable[[], Any],
    codec: Any,
    tasks: Sequence[Any],
    step: int,
) -> dict[str, Any]:
    """pass@1 on the fixed held-out split: greedy, or the mean reward of ``env.eval_samples`` seeded samples
    per task at ``env.eval_temperature`` (the same seeds at every evaluation, so steps are comparable)."""
    import asyncio

    from trace_rl.rollout.agent import run_episode
    from trace_rl.rollout.backends import SamplingParams

    env_cfg = cfg.env
    params = SamplingParams(
        max_new_tokens=cfg.sampling.max_new_tokens,
        temperature=env_cfg.eval_temperature,
        top_p=cfg.sampling.top_p if env_cfg.eval_temperature > 0 else 1.0,
        seed=0,
    )
    k = env_cfg.eval_samples

    async def run_all() -> list[float]:
        eps = await asyncio.gather(
            *[
                run_episode(
                    backend,
                    env_factory(),
                    codec,
                    t,
                    params,
                    max_turns=env_cfg.max_turns,
                    seed=i * k + j,
                )
                for i, t in enumerate(tasks)
                for j in range(k)
            ]
        )
        return [float(e.reward) for e in eps]

    t0 = time.perf_counter()
    rewards = asyncio.run(run_all())
    return {
        "kind": "eval",
        "step": step,
        "method": cfg.method,
        "eval_accuracy": float(np.mean(rewards)) if rewards else float("nan"),
        "eval_tasks": len(tasks),
        "eval_samples": k,
        "eval_temperature": env_cfg.eval_temperature,
        "eval_s": time.perf_counter() - t0,
    }
