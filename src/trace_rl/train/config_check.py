"""Checks of a built config: value ranges (`RANGES`, the one table of every numeric key's accepted values, shown
in docs/config.md) and combinations (`validate`), and what a config resolves to (`budget_shape`,
`estimator_for`). Every failure is a `ConfigError` naming the first bad key and what it accepts in one line."""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trace_rl.train.config_parse import ConfigError

if TYPE_CHECKING:
    from trace_rl.train.config import TrainConfig


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
    "env.max_turns": _AT_LEAST_1,
    "env.pool_size": _AT_LEAST_1,
    "env.train_limit": Range(1, note="or none for every task"),
    "env.eval_tasks": Range(0, note="0 disables evaluation"),
    "env.eval_temperature": Range(0, note="0 = greedy"),
    "env.eval_samples": _AT_LEAST_1,
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
    "sampling.max_new_tokens": _AT_LEAST_1,
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
    "optim.lr": _POSITIVE,
    "optim.clip": Range(0, 1, lo_open=True, hi_open=True),
    "optim.kl_coef": Range(0, note="0 = no KL penalty"),
    "optim.epochs": _AT_LEAST_1,
    "optim.minibatch": Range(0, note="0 = use optim.minibatches"),
    "optim.max_grad_norm": Range(0, lo_open=True, note="a clip of 0 or less zeroes or flips the gradient"),
    "optim.micro_tokens": Range(0, note="0 = one forward pass per minibatch"),
    "optim.minibatches": Range(0, note="0 = use optim.minibatch"),
    "optim.loss_scale_tokens": Range(0, note="0 = sampling.max_new_tokens x env.max_turns"),
    "optim.weight_decay": _NON_NEGATIVE,
    "predictor.prefix_share": _UNIT,
    "predictor.buffer_steps": _AT_LEAST_1,
    "predictor.updates": Range(0, note="0 = the predictor never trains"),
    "predictor.batch_size": _AT_LEAST_1,
    "predictor.lr": _POSITIVE,
    "predictor.history_window": Range(0, note="0 = keep every outcome"),
    "predictor.history_decay": Range(0, 1, lo_open=True),
    "backend.replicas": _AT_LEAST_1,
    "backend.max_in_flight": _AT_LEAST_1,
    "backend.threads": Range(1, 1024, note="more threads than cores only oversubscribes them"),
    "backend.nice": Range(0, 19, note="niceness only lowers priority"),
    "backend.kv_cache_gib": Range(1, note="whole GiB"),
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


def check_ranges(cfg: Any) -> None:
    """Raise ConfigError for the first numeric key of ``cfg`` outside its `RANGES` entry (None passes for
    optional keys), naming the key, the accepted range and the value; a numeric key without an entry is a bug
    (RuntimeError)."""
    for key in numeric_keys(type(cfg)):
        if key not in RANGES:
            raise RuntimeError(
                f"{key}: numeric config key without an entry in trace_rl.train.config_check.RANGES"
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
    from trace_rl.predictor.convex import CONVEX_NAMES

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
    from trace_rl.envs import env_problem

    env_error = env_problem(cfg.env.name, gold=cfg.policy.sft_steps > 0)
    need(env_error is None, "env.name", str(env_error))
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
    defaults = type(cfg.predictor)()  # the section's defaults (no import back into trace_rl.train.config)
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
    backend_defaults = type(cfg.backend)()
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
    """Resolve optim.estimator="auto": grpo for flat methods, tree_grpo for bfcl, treerpo otherwise (paper)."""
    from trace_rl.allocation import get_method

    if cfg.optim.estimator != "auto":
        return cfg.optim.estimator
    if not get_method(cfg.method).has_replays:
        return "grpo"
    return "tree_grpo" if cfg.env.name == "bfcl" else "treerpo"
