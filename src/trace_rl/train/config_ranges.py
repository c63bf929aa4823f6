"""The accepted values of every numeric config key: `Range` and the one table `RANGES` (docs/config.md's
*accepted* column), and `numeric_keys`, the keys the table must cover. Plain data: it imports nothing from
trace_rl, so the parser (error messages) and the checks (`trace_rl.train.config_check`) both read it."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass

__all__ = ["RANGES", "Range", "numeric_keys"]


@dataclass(frozen=True)
class Range:
    """The accepted values of one numeric key: an interval with optional bounds; floats must also be finite.

    Attributes:
        lo: lower bound (None: none).
        hi: upper bound (None: none).
        lo_open: the lower bound itself is refused (``> lo`` instead of ``>= lo``).
        hi_open: the upper bound itself is refused.
        note: what special values mean, e.g. "0 disables evaluation" (shown in the error and the docs).
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    note: str = ""

    def contains(self, x: float) -> bool:
        """Whether ``x`` is finite and inside the interval."""
        if not math.isfinite(x):
            return False
        if self.lo is not None and (x <= self.lo if self.lo_open else x < self.lo):
            return False
        return not (self.hi is not None and (x >= self.hi if self.hi_open else x > self.hi))

    def text(self) -> str:
        """The interval as docs/config.md shows it: ``>= 1``, ``> 0``, ``(0, 1]``, ``[0, 2147483648)``."""
        lo, hi = _num(self.lo), _num(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"{'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '>='} {lo}"
        if self.hi is not None:
            return f"{'<' if self.hi_open else '<='} {hi}"
        return "any finite number"

    def requirement(self) -> str:
        """The error's wording: ``must be at least 1``, ``must be >= 0``, ``must be > 0``, ``must lie in (0, 1]``."""
        if self.lo is not None and self.hi is None and not self.lo_open and self.lo != 0:
            what = f"must be at least {_num(self.lo)}"
        elif self.lo is not None and self.hi is not None:
            what = f"must lie in {self.text()}"
        else:
            what = f"must be {self.text()}"
        return f"{what} ({self.note})" if self.note else what


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


_SEED = Range(0, 2**31, hi_open=True)  # room for the offsets added to it (np.random.seed takes < 2**32)
_POSITIVE = Range(0, lo_open=True)
_NON_NEGATIVE = Range(0)
_AT_LEAST_1 = Range(1)
_UNIT = Range(0, 1)

RANGES: dict[str, Range] = {
    "steps": _AT_LEAST_1,
    "total_budget": Range(0, note="0: the run ends after `steps` steps"),
    "seed": _SEED,
    "eval_every": Range(0, note="0 disables evaluation"),
    "checkpoint_every": _AT_LEAST_1,
    "threads": Range(0, 1024, note="0 = min(cores, 4); more threads than cores only oversubscribes them"),
    "env.max_turns": Range(1, 1024, note="an episode's turns share the policy's context"),
    "env.pool_size": _AT_LEAST_1,
    "env.train_limit": Range(
        1, 100_000, note="or none for every task; the generated envs build each task at start-up"
    ),
    "env.eval_tasks": Range(0, 10_000, note="0 disables evaluation; every evaluation runs them all"),
    "env.eval_temperature": Range(0, note="0 = greedy"),
    "env.eval_samples": Range(1, 1000, note="episodes per held-out task at every evaluation"),
    "env.data_seed": _SEED,
    "policy.sft_steps": Range(0, note="0 = no warm start"),
    "policy.sft_lr": _POSITIVE,
    "policy.sft_batch": _AT_LEAST_1,
    "policy.sft_evals": Range(1, note="the last evaluation checks the jump"),
    "policy.sft_stop_success": Range(0, 1, note="0 = no stop rule"),
    "policy.sft_stop_mixed": _UNIT,
    "policy.sft_min_steps": _NON_NEGATIVE,
    "policy.sft_eval_every": _AT_LEAST_1,
    "policy.sft_probe_prompts": _AT_LEAST_1,
    "sampling.max_new_tokens": Range(1, note="and below the policy's context, checked when the policy loads"),
    "sampling.temperature": Range(0, lo_open=True, note="RL samples"),
    "sampling.top_p": Range(0, 1, lo_open=True),
    "sampling.max_concurrency": _AT_LEAST_1,
    "budget.roots": _AT_LEAST_1,
    "budget.continuations": Range(0, note="0 = no replays"),
    "budget.group_size": Range(2, note="a group of one has no contrast"),
    "budget.replay_cost": Range(0, 1, lo_open=True),
    "budget.min_rollouts": Range(2, note="a group of one has no contrast"),
    "budget.max_rollouts": Range(2, note="or none for no cap"),
    "budget.max_num_gen_batches": Range(0, note="0 = the pool's limit"),
    "budget.sibling_weight": _NON_NEGATIVE,
    "budget.coverage": Range(0, 1, note="share of active prompts drawn uniformly"),
    "optim.lr": _POSITIVE,
    "optim.clip": Range(0, 1, lo_open=True, hi_open=True),
    "optim.kl_coef": Range(0, note="0 = no KL penalty"),
    "optim.epochs": Range(1, 100),
    "optim.minibatch": Range(0, note="0 = use optim.minibatches"),
    "optim.max_grad_norm": Range(0, lo_open=True, note="a clip of 0 or less zeroes or flips the gradient"),
    "optim.micro_tokens": Range(0, note="0 = one forward pass per minibatch"),
    "optim.minibatches": Range(
        0, 4096, note="0 = use optim.minibatch; more than the step's paths leaves some empty"
    ),
    "optim.loss_scale_tokens": Range(0, note="0 = sampling.max_new_tokens x env.max_turns"),
    "optim.weight_decay": _NON_NEGATIVE,
    "predictor.prefix_share": _UNIT,
    "predictor.buffer_steps": _AT_LEAST_1,
    "predictor.updates": Range(0, 10_000, note="0 = the predictor never trains"),
    "predictor.batch_size": _AT_LEAST_1,
    "predictor.lr": _POSITIVE,
    "predictor.history_window": Range(0, note="0 = keep every outcome"),
    "predictor.history_decay": Range(0, 1, lo_open=True),
    "backend.replicas": Range(1, 1024, note="servers launched on this machine"),
    "backend.max_in_flight": _AT_LEAST_1,
    "backend.threads": Range(1, 1024, note="more threads than cores only oversubscribes them"),
    "backend.nice": Range(0, 19, note="niceness only lowers priority"),
    "backend.kv_cache_gib": Range(1, 4096, note="whole GiB per launched server"),
}
"""Every int and float key of `TrainConfig` (``section.key``) and the values it accepts; `check_ranges` applies
it, docs/config.md shows it, and a numeric key missing here fails `numeric_keys`' check and the docs' generation."""


def numeric_keys(cls: type, prefix: str = "") -> list[str]:
    """The ``section.key`` names of every int or float field (optional or not) of the config class ``cls``."""
    out: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out += numeric_keys(hint, f"{prefix}{f.name}.")  # type: ignore[arg-type]
            continue
        args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        if args[0] in (int, float):
            out.append(f"{prefix}{f.name}")
    return out
