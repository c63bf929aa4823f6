"""The accepted values of every numeric config key: the one table `RANGES` (docs/config.md's *accepted* column),
and `numeric_keys`, the keys the table must cover. The keys of TRACE's settings (``budget.*``, ``optim.*``,
``sampling.*``) take their `Range` from their field's metadata (`trace_rl.spec.setting`, where `Range` is
defined; re-exported here); the others are listed here. Plain data: it imports only the config's dataclasses, so the
parser (error messages) and the checks (`trace_rl.train.config_check`) both read it."""

from __future__ import annotations

import dataclasses
import typing

from trace_rl.spec import Range
from trace_rl.train.config_sections import TrainConfig

__all__ = ["RANGES", "Range", "numeric_keys"]


def _metadata_ranges() -> dict[str, Range]:
    """``section.key`` -> `Range` of every section field that declares its range in its metadata (the fields of
    `trace_rl.spec`'s parts)."""
    hints = typing.get_type_hints(TrainConfig)
    return {
        f"{section}.{f.name}": f.metadata["range"]
        for section, hint in hints.items()
        if dataclasses.is_dataclass(hint)
        for f in dataclasses.fields(hint)
        if f.metadata.get("range") is not None
    }


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
    "optim.lr": _POSITIVE,
    "optim.weight_decay": _NON_NEGATIVE,
    **_metadata_ranges(),
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
