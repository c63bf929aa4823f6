"""Checks of a built config: value ranges (`check_ranges` against `trace_rl.train.config_ranges.RANGES`, the one
table of every numeric key's accepted values, shown in docs/config.md), TRACE's settings (`TrainConfig.spec`) and
the native trainer's combinations (`validate`), and what a config resolves to (`budget_shape`, `estimator_for`). Every failure is a `ConfigError` naming the first bad key
and what it accepts in one line."""

from __future__ import annotations

import re
from typing import Any

from trace_rl.spec import Range, SpecError, resolve_estimator
from trace_rl.train.config_parse import ConfigError
from trace_rl.train.config_ranges import RANGES, numeric_keys
from trace_rl.train.config_sections import TrainConfig, spec_key

# RANGES and numeric_keys are re-exported from their owner, config_ranges, and Range from spec: docs name them here
__all__ = ["RANGES", "Range", "budget_shape", "check_ranges", "estimator_for", "numeric_keys", "validate"]


def check_ranges(cfg: Any) -> None:
    """Raise ConfigError for the first numeric key of ``cfg`` outside its `RANGES` entry (None passes for
    optional keys), naming the key, the accepted range and the value; a numeric key without an entry is a bug
    (RuntimeError)."""
    for key in numeric_keys(type(cfg)):
        if key not in RANGES:
            raise RuntimeError(
                f"{key}: numeric config key without an entry in trace_rl.train.config_ranges.RANGES"
            )
        value: Any = cfg
        for part in key.split("."):
            value = getattr(value, part)
        why = RANGES[key].problem(value)
        if why is not None:
            raise ConfigError(f"{key}: {why}")


def validate(cfg: TrainConfig) -> None:
    """Check value ranges (`RANGES`), TRACE's settings (`TrainConfig.spec`, `trace_rl.spec.TraceSpec`: one
    check for the native trainer and both adapters) and the native trainer's combinations; raise ConfigError
    naming the first bad key. The options of one predictor or backend variant are checked when their section is
    built (`config_sections._only_variant`)."""

    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    check_ranges(cfg)
    try:
        cfg.spec  # noqa: B018 (building the spec checks it)
    except SpecError as exc:
        raise ConfigError(f"{spec_key(exc.part, exc.key)}: {exc.why}") from None
    need(
        cfg.device in ("auto", "cpu") or re.fullmatch(r"cuda(:\d+)?", cfg.device) is not None,
        "device",
        f"must be auto, cpu, cuda or cuda:N, got {cfg.device!r}",
    )
    from trace_rl.envs import env_kwargs_problem, env_problem
    from trace_rl.predictor.names import GROUP_OUTCOME_NAMES, GROUP_WITH_EVIDENCE

    env_error = env_problem(cfg.env.name, gold=cfg.policy.sft_steps > 0)
    need(env_error is None, "env.name", str(env_error))
    need("max_turns" not in cfg.env.env_kwargs, "env.env_kwargs", "max_turns is set by env.max_turns")
    kwargs_error = env_kwargs_problem(cfg.env.name, cfg.env.env_kwargs) if cfg.env.env_kwargs else None
    need(kwargs_error is None, "env.env_kwargs", str(kwargs_error))
    need(
        cfg.env.eval_temperature > 0 or cfg.env.eval_samples == 1,
        "env.eval_samples",
        "must be 1 when env.eval_temperature is 0 (greedy samples are identical)",
    )
    need(
        not (cfg.budget.state_evidence and cfg.predictor.name in GROUP_OUTCOME_NAMES),
        "budget.state_evidence",
        f"with predictor.name={cfg.predictor.name}: {GROUP_WITH_EVIDENCE}",
    )
    try:
        shape = budget_shape(cfg)
    except ValueError as exc:
        raise ConfigError(f"budget: {exc}") from None
    need(
        shape.min_rollouts <= shape.roots,
        "budget.min_rollouts",
        f"must be at most budget.roots ({shape.roots}): an active prompt needs min_rollouts of the step's roots",
    )
    need(
        shape.max_rollouts is None or shape.max_rollouts >= shape.group_size,
        "budget.max_rollouts",
        f"must be at least budget.group_size ({shape.group_size}) so the allocating methods can spend what the "
        "uniform ones do",
    )  # with cap >= n, M roots always fit the batch: floor(M (1 + N c) / n) * cap >= M
    need(
        cfg.env.pool_size >= shape.batch_size,
        "env.pool_size",
        f"must be at least the baselines' batch size {shape.batch_size} (= floor(M (1 + N c) / n))",
    )
    need(
        cfg.method != "dapo" or cfg.env.pool_size >= cfg.budget.max_num_gen_batches * shape.batch_size,
        "budget.max_num_gen_batches",
        f"dapo draws up to max_num_gen_batches batches of {shape.batch_size} distinct prompts from the step's "
        f"pool of env.pool_size={cfg.env.pool_size}: raise env.pool_size or lower the cap",
    )
    need(
        cfg.total_budget == 0 or cfg.total_budget >= shape.total,
        "total_budget",
        f"must be 0 or at least one step's budget ({shape.total:g} rollout-equivalents)",
    )
    need(
        cfg.policy.sft_dtype in ("float32", "bfloat16"),
        "policy.sft_dtype",
        "must be float32 or bfloat16 (the warm start under autocast to bfloat16), "
        f"got {cfg.policy.sft_dtype!r}",
    )
    need(
        not cfg.policy.sft_compile or cfg.policy.sft_steps > 0,
        "policy.sft_compile",
        "compiles the warm start's SFT steps: with policy.sft_steps 0 there are none, so it cannot take effect",
    )
    need(
        cfg.backend.kind != "sglang" or any(u.strip() for u in cfg.backend.urls.split(",")),
        "backend.urls",
        "must list the running SGLang servers with backend.kind=sglang (e.g. http://host:30000,http://host:30001):"
        " trace-rl launches only vLLM servers",
    )
    need(
        cfg.backend.kind != "vllm" or cfg.sampling.top_p == 1,
        "sampling.top_p",
        "must be 1 with backend.kind=vllm (vLLM's logprobs after top-p are not what the trainer recomputes)",
    )


def budget_shape(cfg: TrainConfig) -> Any:
    """The run's `BudgetShape` (`TraceSpec.shape`)."""
    return cfg.spec.shape()


def estimator_for(cfg: TrainConfig) -> str:
    """Resolve optim.estimator="auto" for the run's method and environment (`trace_rl.spec.resolve_estimator`:
    grpo for flat methods, tree_grpo for bfcl and for trace_adaptive, treerpo otherwise, as in the paper)."""
    return resolve_estimator(cfg.optim.estimator, cfg.method, cfg.env.name)
