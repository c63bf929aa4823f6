"""Data hygiene (issue 22): which prompts a run evaluates on, trains on with RL, and warm-starts on.

Three task lists per run, kept apart by normalised prompt text (`normalize_prompt`), held-out first:

    held-out  ``env.eval_tasks`` tasks of the test split at ``env.data_seed``: never trained on
    RL pool   the train split at ``env.data_seed`` minus every held-out text
    SFT       the warm start's own stream, the train split at ``env.data_seed + SFT_SEED_OFFSET`` (with
              ``policy.sft_task_kwargs`` when set), minus every held-out and every RL-pool text, then its first
              ``env.train_limit`` tasks (as many as before the filter when the stream has them)

None of the three depends on the run's ``seed``: the runs of one ``trace-rl compare`` (seeds 0..K-1) evaluate on
the same held-out tasks, draw from the same RL pool (each in its own seeded order) and share one warm start that
saw none of that pool's prompts. Filtering is by text because different generator configs or seeds can produce
the same question (reasoning-gym seeds item ``i`` with ``Random(seed + i)``, so two seeds a few apart share
almost all items, and short expressions repeat by chance), and because task ids differ where texts agree.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trace_rl.errors import DataError
from trace_rl.types import Task

if TYPE_CHECKING:
    from trace_rl.train.config import TrainConfig

SFT_SEED_OFFSET = 2_000_006
"""Added to ``env.data_seed`` for the warm start's stream. Twice the math test split's offset (1_000_003), so the
reasoning-gym items of the three streams (``Random(seed + i)``) are distinct for any split of up to a million
tasks; the text filter removes whatever coincides anyway."""

_SPACE = re.compile(r"\s+")


def normalize_prompt(text: str) -> str:
    """The form in which two prompts count as the same: Unicode NFKC, case-folded, runs of whitespace as one
    space, no leading or trailing space."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


@dataclass(frozen=True)
class TaskSplits:
    """The task lists of one run, pairwise disjoint in normalised prompt text.

    Attributes:
        held_out: evaluation tasks, as loaded.
        rl_pool: the RL pool (the data cursor samples candidate pools from it), in load order.
        sft: the warm start's tasks (empty without a warm start), in load order.
        rl_dropped: training tasks removed because their prompt is a held-out prompt.
        sft_dropped: warm-start tasks removed because their prompt is a held-out or an RL-pool prompt.
    """

    held_out: tuple[Task, ...]
    rl_pool: tuple[Task, ...]
    sft: tuple[Task, ...]
    rl_dropped: int = 0
    sft_dropped: int = 0


def disjoint_tasks(
    held_out: Sequence[Task],
    train: Sequence[Task],
    sft: Sequence[Task] = (),
    *,
    min_rl: int = 1,
    min_sft: int = 0,
    sft_limit: int | None = None,
) -> TaskSplits:
    """Held-out first; RL pool = ``train`` minus held-out texts; SFT = ``sft`` minus held-out and RL-pool texts.

    Order and duplicates within one list are kept (a repeated training prompt stays as likely to be drawn).

    Args:
        held_out: the evaluation tasks.
        train: candidate RL-pool tasks.
        sft: candidate warm-start tasks (empty: no warm start).
        min_rl: fewest RL-pool tasks that may remain.
        min_sft: fewest warm-start tasks that may remain (0 accepts an empty list).
        sft_limit: keep at most this many warm-start tasks (the first ones after filtering; None: all).

    Returns:
        `TaskSplits` whose three lists share no normalised prompt text.

    Raises:
        ValueError: filtering leaves fewer than ``min_rl`` RL-pool or ``min_sft`` warm-start tasks (the message
            gives the counts); ``min_rl`` or ``min_sft`` negative.
    """
    if min_rl < 0 or min_sft < 0 or (sft_limit is not None and sft_limit < 0):
        raise ValueError(f"min_rl, min_sft and sft_limit must be >= 0, got {min_rl}, {min_sft}, {sft_limit}")
    held_texts = {normalize_prompt(t.prompt) for t in held_out}
    rl_pool = tuple(t for t in train if normalize_prompt(t.prompt) not in held_texts)
    if len(rl_pool) < min_rl:
        raise DataError(
            f"the RL pool keeps {len(rl_pool)} of {len(train)} training tasks after removing the "
            f"{len(train) - len(rl_pool)} whose prompt is a held-out prompt; at least {min_rl} are needed"
        )
    taken = held_texts | {normalize_prompt(t.prompt) for t in rl_pool}
    kept_sft = tuple(t for t in sft if normalize_prompt(t.prompt) not in taken)
    dropped_sft = len(sft) - len(kept_sft)
    kept_sft = kept_sft[:sft_limit]
    if len(kept_sft) < min_sft:
        raise DataError(
            f"the warm start keeps {len(kept_sft)} of {len(sft)} tasks after removing the "
            f"{dropped_sft} whose prompt is a held-out or RL-pool prompt; at least {min_sft} are needed"
        )
    return TaskSplits(
        held_out=tuple(held_out),
        rl_pool=rl_pool,
        sft=kept_sft,
        rl_dropped=len(train) - len(rl_pool),
        sft_dropped=dropped_sft,
    )


def shared_prompts(a: Sequence[Task], b: Sequence[Task]) -> int:
    """Distinct normalised prompt texts of ``a`` that also occur in ``b`` (the overlap measure of docs)."""
    return len({normalize_prompt(t.prompt) for t in a} & {normalize_prompt(t.prompt) for t in b})


def run_tasks(cfg: TrainConfig) -> TaskSplits:
    """Load and filter the task lists of a run with config ``cfg`` (see the module docstring).

    The held-out tasks are loaded whenever ``env.eval_tasks`` > 0 (also with ``eval_every`` 0, so the RL pool
    and the warm start stay clean for a later evaluation); the warm-start stream only when ``policy.sft_steps``
    > 0.

    Raises:
        ValueError: the environment's loader rejects the config, or filtering leaves fewer RL-pool tasks than
            ``env.pool_size`` or fewer warm-start tasks than ``max(policy.sft_batch, policy.sft_probe_prompts)``
            (the message names the keys that change it).
    """
    from trace_rl.envs import load_tasks

    env, pol = cfg.env, cfg.policy
    held_out = (
        load_tasks(env.name, "test", env.eval_tasks, env.data_seed, **env.task_kwargs)
        if env.eval_tasks
        else []
    )
    train = load_tasks(env.name, "train", env.train_limit, env.data_seed, **env.task_kwargs)
    sft: list[Task] = []
    if pol.sft_steps > 0:  # enough candidates that env.train_limit remain after filtering (finite sets: all)
        kwargs = env.task_kwargs if pol.sft_task_kwargs is None else pol.sft_task_kwargs
        limit = None if env.train_limit is None else env.train_limit + len(held_out) + len(train)
        sft = load_tasks(env.name, "train", limit, env.data_seed + SFT_SEED_OFFSET, **kwargs)
    min_sft = max(pol.sft_batch, pol.sft_probe_prompts) if pol.sft_steps > 0 else 0
    try:
        return disjoint_tasks(
            held_out, train, sft, min_rl=env.pool_size, min_sft=min_sft, sft_limit=env.train_limit
        )
    except ValueError as exc:
        raise DataError(
            f"{exc} (env.pool_size={env.pool_size}, policy.sft_batch={pol.sft_batch}, "
            f"policy.sft_probe_prompts={pol.sft_probe_prompts}); for a finite data set lower env.train_limit to "
            "leave training tasks for the warm start, or change env.eval_tasks / env.train_limit"
        ) from None
