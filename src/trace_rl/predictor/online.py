"""Online training of the shared predictor after each training step (pure numpy around the predictor).

After step s the trainer holds that step's tree nodes as :class:`NodeExample` records (text, target, depth,
weight). :meth:`OnlineTrainer.observe_step` then

1. scores them first (they are unseen, so this is a held-out evaluation; pass the predictions already made
   during allocation to skip the extra pass) and reports MSE / Spearman / calibration overall and by depth;
2. pushes them into a replay buffer of the last ``buffer_steps`` steps (targets shift as the policy improves,
   so old steps are forgotten, but a short memory keeps the model from chasing the last batch only);
3. runs ``updates_per_step`` updates when that is set (a count), otherwise
   ``min(ceil(passes * P / prompt_slots), max_updates_per_step)``, P = prompt-level examples of this step. Each batch of
   ``batch_size`` holds ``round(prefix_share * batch_size)`` prefix examples (paper: about 6%) and prompt-level
   examples in the rest; within each level ``current_share`` of the slots come from this step (cycled through
   without replacement, so a pass sees each example once) and the rest uniformly from older buffered steps.

Predictors that refit on what they were given (the ``refit`` capability,
`trace_rl.predictor.capabilities.Refitting`: the convex predictors of :mod:`trace_rl.predictor.convex`) keep their
own store of past examples (a window of steps): for them step 3 is one ``update`` call with all of this step's new
examples (nothing re-fed from the buffer, which would count them twice).

Cold start: until the first update the predictor returns its prior and ``predictor.is_warm`` is False; the
training step should then allocate uniformly (docs/predictor.md).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.base import SuccessPredictor
from trace_rl.predictor.capabilities import check_capabilities, refits
from trace_rl.predictor.examples import NodeExample, split_by_level
from trace_rl.predictor.metrics import predictor_report


@dataclass(frozen=True)
class OnlineConfig:
    """Online-training schedule of the predictor.

    Attributes:
        batch_size: examples per update.
        prefix_share: share of prefix (depth >= 1) examples in each batch, in [0, 1] (paper: about 6%).
        buffer_steps: steps kept in the replay buffer, including the current one (>= 1).
        current_share: share of each level's slots drawn from the current step when older steps exist.
        passes: passes over the current step's prompt-level examples per step (> 0).
        max_updates_per_step: cap on updates per step (when ``updates_per_step`` is None).
        updates_per_step: exactly this many updates per step (None: the passes rule above).
        evaluate: score the new examples before training on them (held-out metrics).
        seed: seed of the batch sampler.
    """

    batch_size: int = 32
    prefix_share: float = 0.0625
    buffer_steps: int = 4
    current_share: float = 0.5
    passes: float = 1.0
    max_updates_per_step: int = 64
    updates_per_step: int | None = None
    evaluate: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        checks = [
            (self.batch_size >= 1, "batch_size must be >= 1"),
            (0.0 <= self.prefix_share <= 1.0, "prefix_share must be in [0, 1]"),
            (self.buffer_steps >= 1, "buffer_steps must be >= 1"),
            (0.0 <= self.current_share <= 1.0, "current_share must be in [0, 1]"),
            (self.passes > 0, "passes must be > 0"),
            (self.max_updates_per_step >= 1, "max_updates_per_step must be >= 1"),
            (
                self.updates_per_step is None or self.updates_per_step >= 0,
                "updates_per_step must be >= 0 (or None)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"OnlineConfig: {message}")


class _Cycler:
    """Draws from range(n) through successive random permutations (each index once per epoch)."""

    def __init__(self, n: int, rng: np.random.Generator) -> None:
        self.n = n
        self.rng = rng
        self.queue: list[int] = []

    def take(self, k: int) -> list[int]:
        """``min(k, n)`` distinct indices, continuing the current permutation."""
        out: list[int] = []
        while len(out) < min(k, self.n):
            if not self.queue:
                perm = [int(i) for i in self.rng.permutation(self.n)]
                taken = set(
                    out
                )  # already in this batch: put them at the end of the new epoch (we pop the tail)
                self.queue = [i for i in perm if i in taken] + [i for i in perm if i not in taken]
            out.append(self.queue.pop())
        return out


class OnlineTrainer:
    """Trains a :class:`SuccessPredictor` on each step's tree nodes with a replay buffer.

    Args:
        predictor: the shared predictor (updated in place).
        config: the schedule.

    Raises:
        TypeError: the predictor's declared capabilities do not hold (`check_capabilities`).
    """

    def __init__(self, predictor: SuccessPredictor, config: OnlineConfig | None = None) -> None:
        check_capabilities(predictor)
        self.predictor = predictor
        self.config = config or OnlineConfig()
        self.rng = np.random.default_rng(self.config.seed)
        self.buffer: deque[list[NodeExample]] = deque(maxlen=self.config.buffer_steps)
        self.steps = 0

    def slots(self, has_prompt: bool, has_prefix: bool) -> tuple[int, int]:
        """(prompt slots, prefix slots) of a batch given which levels have data."""
        b = self.config.batch_size
        if not has_prefix:
            return b, 0
        if not has_prompt:
            return 0, b
        n_prefix = round(self.config.prefix_share * b)
        return b - n_prefix, n_prefix

    def plan_batches(self) -> list[list[NodeExample]]:
        """Batches for the current step (the newest buffered step), following the schedule of the module doc."""
        if not self.buffer:
            return []
        cfg = self.config
        current = self.buffer[-1]
        older = [e for step in list(self.buffer)[:-1] for e in step]
        cur = split_by_level(current)
        old = split_by_level(older)
        n_prompt, n_prefix = self.slots(bool(cur[0] or old[0]), bool(cur[1] or old[1]))
        if cfg.updates_per_step is not None:
            n_updates = cfg.updates_per_step
        elif n_prompt and cur[0]:
            n_updates = math.ceil(cfg.passes * len(cur[0]) / n_prompt)
        elif n_prefix and cur[1]:
            n_updates = math.ceil(cfg.passes * len(cur[1]) / n_prefix)
        else:
            return []
        if cfg.updates_per_step is None:
            n_updates = max(1, min(n_updates, cfg.max_updates_per_step))
        cyclers = [_Cycler(len(cur[0]), self.rng), _Cycler(len(cur[1]), self.rng)]
        batches: list[list[NodeExample]] = []
        for _ in range(n_updates):
            batch: list[NodeExample] = []
            for level, slots in ((0, n_prompt), (1, n_prefix)):
                pool_cur, pool_old = cur[level], old[level]
                if slots == 0 or not (pool_cur or pool_old):
                    continue
                if not pool_old:
                    k_cur = slots
                elif not pool_cur:
                    k_cur = 0
                else:
                    k_cur = round(cfg.current_share * slots)
                k_cur = min(k_cur, len(pool_cur))
                k_old = min(slots - k_cur, len(pool_old))
                batch.extend(pool_cur[i] for i in cyclers[level].take(k_cur))
                if k_old:
                    batch.extend(
                        pool_old[int(i)] for i in self.rng.choice(len(pool_old), k_old, replace=False)
                    )
            if batch:
                batches.append(batch)
        return batches

    def observe_step(
        self, examples: Sequence[NodeExample], predictions: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        """Evaluate on, buffer, and train on one step's examples.

        Args:
            examples: this step's nodes (prompt level and prefixes) with their targets.
            predictions: optional (n,) estimates already computed for these examples; scored here otherwise.

        Returns:
            Held-out metrics ``predictor/...`` (see :func:`predictor_report`) plus ``predictor/updates``,
            ``predictor/train_loss`` (mean over this step's updates), ``predictor/update_seconds``,
            ``predictor/score_seconds``, ``predictor/buffer_examples``, ``predictor/warm`` (1 after training).

        Raises:
            ValueError: an element is not a NodeExample, or ``predictions`` has the wrong length.
        """
        items = list(examples)
        for i, e in enumerate(items):
            if not isinstance(e, NodeExample):
                raise ValueError(f"examples[{i}] must be a NodeExample; got {type(e).__name__}")
        metrics: dict[str, float] = {}
        score_seconds = 0.0
        if items and (self.config.evaluate or predictions is not None):
            if predictions is None:
                start = time.perf_counter()
                preds = self.predictor.predict([e.text for e in items])
                score_seconds = time.perf_counter() - start
            else:
                preds = np.asarray(predictions, dtype=np.float64)
                if preds.shape != (len(items),):
                    raise ValueError(f"predictions must have shape ({len(items)},); got {preds.shape}")
            metrics.update(
                predictor_report(
                    np.clip(preds, 0.0, 1.0),
                    [e.target for e in items],
                    [e.depth for e in items],
                    [e.weight for e in items],
                )
            )
        self.buffer.append(items)
        self.steps += 1
        losses: list[float] = []
        update_seconds = 0.0
        batches = ([items] if items else []) if refits(self.predictor) else self.plan_batches()
        for batch in batches:
            out = self.predictor.update(
                [e.text for e in batch], [e.target for e in batch], [e.weight for e in batch]
            )
            losses.append(out["loss"])
            update_seconds += out.get("seconds", 0.0)
        metrics["predictor/updates"] = float(len(losses))
        metrics["predictor/train_loss"] = float(np.mean(losses)) if losses else float("nan")
        metrics["predictor/update_seconds"] = update_seconds
        metrics["predictor/score_seconds"] = score_seconds
        metrics["predictor/buffer_examples"] = float(sum(len(s) for s in self.buffer))
        metrics["predictor/warm"] = float(self.predictor.is_warm)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Buffer, sampler state and step count (the predictor's own state is saved separately)."""
        return {
            "steps": self.steps,
            "rng": self.rng.bit_generator.state,
            "buffer": [[asdict(e) for e in step] for step in self.buffer],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`. Raises ValueError on a malformed state."""
        try:
            buffer = [[NodeExample(**e) for e in step] for step in state["buffer"]]
            self.rng.bit_generator.state = state["rng"]
            self.steps = int(state["steps"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"online trainer state is malformed: {exc}") from None
        self.buffer = deque(buffer, maxlen=self.config.buffer_steps)
