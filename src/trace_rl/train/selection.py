"""Per-step selection diagnostics: how well the predictor ranked the step's prompts, and how the prompts a method
trained on differ from the candidate pool it chose them from (selection drift).

Issue 58 found that on `agentic` every method that selects prompts trains a worse agent than GRPO while keeping
more groups mixed; two measured suspects are a predictor that hardly ranks prompts there (Spearman 0.21 against
0.65 on the demo) and a selection that drifts toward shorter tasks. These fields put both in every step record:

- ``predictor_root_spearman``: Spearman correlation over the step's active prompts between the estimate v_i the
  allocation used and the prompt's realised root success (mean reward of its root rollouts). NaN when fewer than
  3 prompts were active or either side is constant. For GRPO (random prompts) it measures the predictor on an
  unselected sample; for selecting methods on the selected one (a narrower range of v, so usually lower).
- ``selected_<x>`` against ``pool_<x>`` for x in ``predicted`` (mean v), ``prompt_chars`` (mean prompt length in
  characters) and ``gold_turns`` (mean assistant turns of the environment's gold solution, the task's length in
  turns; absent where the environment has none). "Selected" = the prompts that got root rollouts (unweighted);
  "pool" = the step's whole candidate pool. A difference that persists over steps is selection drift.

Pure functions of the step's pool, estimates and results; `trace_rl.train.step` adds them to the record. The
same outcomes feed `trace_adaptive`'s state (`observe_adaptive`): the estimates its allocation used next to the
root outcomes they met, and its replays' flips.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.adaptive import AdaptiveState
from trace_rl.predictor.metrics import spearman
from trace_rl.types import Task

__all__ = ["MIN_RANKED_PROMPTS", "gold_turns_of", "observe_adaptive", "selection_fields"]

MIN_RANKED_PROMPTS = 3
"""Fewest active prompts for which ``predictor_root_spearman`` is computed (NaN below)."""


_GOLD_TURNS: dict[tuple[str, str], int | None] = {}


def gold_turns_of(task: Task) -> int | None:
    """Assistant turns of ``task``'s gold solution (`trace_rl.envs.gold_trajectory`), None where the environment
    has no gold trajectory or it cannot be built for this task (any error: this is a diagnostic field, left out
    rather than stopping training). Cached per (environment, task id) for the process."""
    key = (task.env, task.id)
    if key not in _GOLD_TURNS:
        from trace_rl.envs import gold_trajectory

        try:
            _GOLD_TURNS[key] = len(gold_trajectory(task))
        except Exception:  # a user environment may raise anything; the field is then left out
            _GOLD_TURNS[key] = None
    return _GOLD_TURNS[key]


def selection_fields(
    pool: Sequence[Task],
    v: npt.ArrayLike,
    active: Sequence[Any],
    *,
    gold_turns: Callable[[Task], int | None] = gold_turns_of,
) -> dict[str, float]:
    """The step record's selection diagnostics (module docstring).

    Args:
        pool: the step's candidate pool, (P,) tasks.
        v: float (P,) the estimates the allocation used (pool order).
        active: the prompts that got root rollouts, as `trace_rl.rollout.expansion.PromptResult`-like objects
            with ``.task`` and ``.roots`` (episodes with ``.reward``); a task may appear more than once (not here).
        gold_turns: task -> gold solution turns or None (injected in tests).

    Returns:
        ``predictor_root_spearman``, ``selected_predicted``, ``pool_predicted``, ``selected_prompt_chars``,
        ``pool_prompt_chars`` and, where every task has a gold solution, ``selected_gold_turns`` and
        ``pool_gold_turns``; NaN for the selected ones when no prompt was active.

    Raises:
        ValueError: ``v`` is not (P,), or an active task is not in the pool.
    """
    est = np.asarray(v, dtype=np.float64)
    if est.shape != (len(pool),):
        raise ValueError(f"v must have shape ({len(pool)},), one estimate per pool task; got {est.shape}")
    index = {t.id: i for i, t in enumerate(pool)}
    rows = [r for r in active if len(r.roots) > 0]
    missing = [r.task.id for r in rows if r.task.id not in index]
    if missing:
        raise ValueError(f"active prompt {missing[0]!r} is not in the step's candidate pool")
    chosen = np.asarray([index[r.task.id] for r in rows], dtype=np.int64)
    success = np.asarray([np.mean([float(e.reward) for e in r.roots]) for r in rows], dtype=np.float64)
    nan = float("nan")

    def mean_at(x: npt.NDArray[np.float64], idx: npt.NDArray[np.int64]) -> float:
        return float(x[idx].mean()) if idx.size else nan

    chars = np.asarray([len(t.prompt) for t in pool], dtype=np.float64)
    out = {
        "predictor_root_spearman": (
            spearman(est[chosen], success) if chosen.size >= MIN_RANKED_PROMPTS else nan
        ),
        "selected_predicted": mean_at(est, chosen),
        "pool_predicted": float(est.mean()) if est.size else nan,
        "selected_prompt_chars": mean_at(chars, chosen),
        "pool_prompt_chars": float(chars.mean()) if chars.size else nan,
    }
    turns = [gold_turns(t) for t in pool]
    if turns and all(n is not None for n in turns):
        arr = np.asarray(turns, dtype=np.float64)
        out["selected_gold_turns"] = mean_at(arr, chosen)
        out["pool_gold_turns"] = float(arr.mean())
    return out


def observe_adaptive(
    state: AdaptiveState,
    pool: Sequence[Task],
    v: Any,
    generated: Sequence[Any],
    record: Mapping[str, Any],
    *,
    estimates_used: bool,
) -> None:
    """Hand one step's outcomes to `trace_adaptive`'s state (`AdaptiveState.observe_rewards`): each active
    prompt's estimate and root rewards, and the step's replays with how many flipped (``replay_flips_depth_*``)."""
    index = {t.id: i for i, t in enumerate(pool)}
    rows = [r for r in generated if r.roots]
    state.observe_rewards(
        [float(v[index[r.task.id]]) for r in rows],
        [[float(e.reward) for e in r.roots] for r in rows],
        replays=int(record["replays"]),
        flips=int(sum(x for k, x in record.items() if k.startswith("replay_flips_depth_"))),
        estimates_used=estimates_used,
    )
