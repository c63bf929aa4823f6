"""Checks of a built config: value ranges (`check_ranges` against `trace_rl.train.config_ranges.RANGES`, the one
table of every numeric key's accepted values, shown in docs/config.md) and combinations (`validate`), and what a
config resolves to (`budget_shape`, `estimator_for`). Every failure is a `ConfigError` naming the first bad key
and what it accepts in one line."""

from __future__ import annotations

import math
import re
from typing import Any

from trace_rl.train.config_parse import ConfigError
from trace_rl.train.config_ranges import RANGES, Range, numeric_keys
from trace_rl.train.config_sections import BackendSection, PredictorSection, TrainConfig

# RANGES, Range and numeric_keys are re-exported from their owner, config_ranges: docs name them here
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
        if value is None:
            continue
        r = RANGES[key]
        if r.contains(float(value)):
            continue
        if math.isfinite(float(value)):
            raise ConfigError(f"{key}: {r.requirement()}, got {value!r}")
        where = f"in {r.text()}" if r.lo is not None and r.hi is not None else r.text()
        note = f" ({r.note})" if r.note else ""
        raise ConfigError(f"{key}: must be a finite number {where}{note}, got {value!r}")


def validate(cfg: TrainConfig) -> None:
    """Check value ranges (`RANGES`) and combinations; raise ConfigError naming the first bad key."""
    from trace_rl.allocation import METHODS
    from trace_rl.predictor.names import CONVEX_NAMES

    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    check_ranges(cfg)
    need(cfg.method in METHODS, "method", f"unknown method {cfg.method!r} (known: {', '.join(METHODS)})")
    need(
        cfg.device in ("auto", "cpu") or re.fullmatch(r"cuda(:\d+)?", cfg.device) is not None,
        "device",
        f"must be auto, cpu, cuda or cuda:N, got {cfg.device!r}",
    )
    from trace_rl.envs import env_kwargs_problem, env_problem

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
        cfg.budget.accounting in ("paper", "token"),
        "budget.accounting",
        f"must be paper or token, got {cfg.budget.accounting!r}",
    )
    from trace_rl.allocation import PREFIX_OBJECTIVES, SIBLING_WEIGHT
    from trace_rl.allocation.adaptive import COVERAGE

    need(
        cfg.budget.prefix_objective in PREFIX_OBJECTIVES,
        "budget.prefix_objective",
        f"must be {' or '.join(PREFIX_OBJECTIVES)}, got {cfg.budget.prefix_objective!r}",
    )
    need(
        cfg.budget.prefix_objective == "paper" or _uses_allocate_prefixes(cfg.method),
        "budget.prefix_objective",
        f"contrast replaces the objective of allocate_prefixes, which method {cfg.method} does not use "
        f"(methods that do: {', '.join(m for m in METHODS if _uses_allocate_prefixes(m))})",
    )
    from trace_rl.predictor.names import GROUP_OUTCOME_NAMES, GROUP_WITH_EVIDENCE

    need(
        not (cfg.budget.state_evidence and cfg.predictor.name in GROUP_OUTCOME_NAMES),
        "budget.state_evidence",
        f"with predictor.name={cfg.predictor.name}: {GROUP_WITH_EVIDENCE}",
    )
    need(
        not cfg.budget.state_evidence or _uses_allocate_prefixes(cfg.method),
        "budget.state_evidence",
        f"values the anchors of allocate_prefixes, which method {cfg.method} does not use "
        f"(methods that do: {', '.join(m for m in METHODS if _uses_allocate_prefixes(m))})",
    )
    need(
        cfg.method == "trace_adaptive" or cfg.budget.coverage == COVERAGE,
        "budget.coverage",
        f"applies to method=trace_adaptive only (its coverage floor); method {cfg.method} cannot use it",
    )
    need(
        cfg.budget.prefix_objective == "contrast" or cfg.budget.sibling_weight == SIBLING_WEIGHT,
        "budget.sibling_weight",
        "applies to budget.prefix_objective=contrast only; leave it at its default with the paper's objective",
    )
    try:
        shape = budget_shape(cfg)
    except ValueError as exc:
        raise ConfigError(f"budget: {exc}") from None
    need(
        shape.min_rollouts >= 2, "budget.min_rollouts", "must be at least 2 (a group of one has no contrast)"
    )
    need(
        shape.min_rollouts <= shape.roots,
        "budget.min_rollouts",
        f"must be at most budget.roots ({shape.roots}): an active prompt needs min_rollouts of the step's roots",
    )
    cap = shape.max_rollouts
    need(
        cap is None or cap >= shape.group_size,
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
        cfg.optim.estimator in ("auto", "grpo", "tree_grpo", "treerpo"),
        "optim.estimator",
        f"must be auto, grpo, tree_grpo or treerpo, got {cfg.optim.estimator!r}",
    )
    need(
        cfg.optim.loss_agg
        in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
        "optim.loss_agg",
        "must be token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm (verl's loss_agg_mode),"
        f" got {cfg.optim.loss_agg!r}",
    )
    need(
        cfg.optim.zero_advantage_rows in ("count", "drop"),
        "optim.zero_advantage_rows",
        "must be count (their tokens stay in the loss denominator, as verl) or drop, "
        f"got {cfg.optim.zero_advantage_rows!r}",
    )
    need(
        cfg.optim.loss_scale_tokens == 0 or cfg.optim.loss_agg == "seq-mean-token-sum-norm",
        "optim.loss_scale_tokens",
        "only seq-mean-token-sum-norm uses a constant length normaliser; leave it 0",
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
        cfg.optim.packing in ("tree", "none"),
        "optim.packing",
        "must be tree (shared prefixes computed once per minibatch) or none (padded rows, one per path), "
        f"got {cfg.optim.packing!r}",
    )
    need(
        (cfg.optim.minibatches > 0) != (cfg.optim.minibatch > 0),
        "optim.minibatches",
        "set exactly one of optim.minibatches (optimizer steps per RL step, equal for every method) and "
        "optim.minibatch (paths per step); set the other to 0",
    )
    defaults = PredictorSection()
    need(
        cfg.predictor.name in CONVEX_NAMES
        or (
            cfg.predictor.history_window == defaults.history_window
            and cfg.predictor.history_decay == defaults.history_decay
        ),
        "predictor.history_window",
        f"and predictor.history_decay apply to the convex predictors ({', '.join(CONVEX_NAMES)}) only; a neural"
        " predictor keeps predictor.buffer_steps steps",
    )
    need(
        cfg.backend.kind in ("local", "vllm", "sglang"),
        "backend.kind",
        f"must be local, vllm or sglang, got {cfg.backend.kind!r}",
    )
    need(
        cfg.backend.kind != "sglang" or any(u.strip() for u in cfg.backend.urls.split(",")),
        "backend.urls",
        "must list the running SGLang servers with backend.kind=sglang (e.g. http://host:30000,http://host:30001):"
        " trace-rl launches only vLLM servers",
    )
    need(
        cfg.backend.dtype in ("float32", "bfloat16"),
        "backend.dtype",
        f"must be float32 or bfloat16, got {cfg.backend.dtype!r}",
    )
    # settings that cannot take effect in this configuration are errors (never silently ignored)
    need(
        cfg.method == "dapo" or cfg.budget.max_num_gen_batches == 0,
        "budget.max_num_gen_batches",
        f"only method dapo draws extra generation batches; leave it 0 with method {cfg.method}",
    )
    if (
        cfg.predictor.name in CONVEX_NAMES
    ):  # one convex refit per step on the kept outcomes: no batches, no lr
        for key in ("updates", "batch_size", "lr", "prefix_share", "buffer_steps"):
            need(
                getattr(cfg.predictor, key) == getattr(defaults, key),
                f"predictor.{key}",
                f"has no effect on the convex predictor {cfg.predictor.name!r} (one refit per step on the outcomes "
                "of predictor.history_window steps); leave it at its default "
                f"{getattr(defaults, key)!r} or pick a neural predictor",
            )
    backend_defaults = BackendSection()
    launches = cfg.backend.kind == "vllm" and not cfg.backend.urls.strip()
    for key in ("replicas", "dtype", "threads", "nice", "kv_cache_gib"):
        need(
            launches or getattr(cfg.backend, key) == getattr(backend_defaults, key),
            f"backend.{key}",
            "applies only to vLLM servers that trace-rl launches (backend.kind=vllm, backend.urls empty); "
            f"with backend.kind={cfg.backend.kind}{' and backend.urls set' if cfg.backend.urls.strip() else ''} "
            "it cannot take effect: remove it",
        )
    if cfg.backend.kind == "local":
        need(
            not cfg.backend.urls.strip(),
            "backend.urls",
            "the local engine generates in-process; set backend.kind=vllm or sglang to use servers",
        )
        need(
            cfg.backend.max_in_flight == backend_defaults.max_in_flight,
            "backend.max_in_flight",
            "applies to server replicas only; the local engine batches sampling.max_concurrency requests",
        )
    need(
        cfg.backend.kind != "vllm" or cfg.sampling.top_p == 1,
        "sampling.top_p",
        "must be 1 with backend.kind=vllm (vLLM's logprobs after top-p are not what the trainer recomputes)",
    )


def _uses_allocate_prefixes(method: str) -> bool:
    """The method's prefix strategy is `trace_prefixes` (trace, trace_prefix_only, trace_fresh)."""
    from trace_rl.allocation import METHODS, trace_prefixes

    m = METHODS[method]
    return m.prefixes is trace_prefixes and m.tail_prefixes is None


def budget_shape(cfg: TrainConfig) -> Any:
    """The run's `BudgetShape`."""
    from trace_rl.allocation import BudgetShape

    b = cfg.budget
    return BudgetShape(
        roots=b.roots,
        continuations=b.continuations,
        group_size=b.group_size,
        replay_cost=b.replay_cost,
        min_rollouts=b.min_rollouts,
        max_rollouts=b.max_rollouts,
    )


def estimator_for(cfg: TrainConfig) -> str:
    """Resolve optim.estimator="auto": grpo for flat methods, tree_grpo for bfcl and for trace_adaptive (its
    replays' sibling pairs keep a prompt-level term: docs/allocation.md), treerpo otherwise (paper)."""
    from trace_rl.allocation import get_method

    if cfg.optim.estimator != "auto":
        return cfg.optim.estimator
    if get_method(cfg.method).adaptive:
        return "tree_grpo"
    if not get_method(cfg.method).has_replays:
        return "grpo"
    return "tree_grpo" if cfg.env.name == "bfcl" else "treerpo"
