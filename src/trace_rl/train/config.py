"""Typed, validated training configs: frozen dataclasses, one source of defaults, presets as override files.

A config is built from (1) the dataclass defaults, (2) a preset (configs/<name>.yaml shipped inside the
package) or a user YAML file, (3) command-line overrides ``section.key=value``. Unknown keys and bad values
raise `ConfigError` with one line naming the key, e.g. ``budget.roots: must be a multiple of budget.group_size``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_rl.train.config_parse import ConfigError, build, merge, parse_override, read_yaml

PRESET_DIR = Path(__file__).resolve().parent / "presets"


@dataclass(frozen=True)
class EnvSection:
    """The environment and its task pool.

    Attributes:
        name: environment name (math_python, bfcl, multihop_qa).
        max_turns: turns per episode before it ends with reward 0.
        pool_size: candidate prompts scored per step (the pool the root allocation chooses from).
        train_limit: cap on training tasks loaded (None: all).
        eval_tasks: held-out tasks for the periodic pass@1 evaluation (0 disables it).
        eval_temperature: 0 evaluates greedily; > 0 samples at that temperature (pass@1 = mean reward of
            ``eval_samples`` seeded samples per task, the same seeds at every evaluation).
        eval_samples: samples per held-out task (1 when greedy).
        task_kwargs: extra keyword arguments for the environment's task loader.
    """

    name: str = "math_python"
    max_turns: int = 4
    pool_size: int = 32
    train_limit: int | None = 2000
    eval_tasks: int = 64
    eval_temperature: float = 0.0
    eval_samples: int = 1
    task_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicySection:
    """The policy and its supervised warm start.

    Attributes:
        name: "tiny", "smollm2-135m-instruct" or a local Hugging Face checkpoint path.
        sft_steps: optimizer steps of supervised warm start on gold trajectories before RL (0: none).
        sft_lr: peak learning rate of the warm start.
        sft_batch: sequences per warm-start step.
        sft_evals: probe evaluations during the warm start (evenly spaced, the last at its end): 32 training
            prompts x 8 samples at temperature 1, about half a minute each for the tiny policy on 2 cores.
        require_jump: stop with an error when the warm start ends without any success on its probe prompts.
        render_tools: render the tasks' tool schemas into the system prompt (False keeps prompts short for
            small from-scratch policies, which learn the tool format from the warm start).
        sft_stop_success: when > 0, ``sft_steps`` is a cap and the warm start stops at the first probe (every
            ``sft_eval_every`` steps from ``sft_min_steps``) with mean success >= this and mixed share >=
            ``sft_stop_mixed``; reaching the cap without it is an error (with ``require_jump``). 0: run exactly
            ``sft_steps`` steps with ``sft_evals`` probes.
        sft_stop_mixed: the stop rule's minimum share of probe prompts with mixed outcomes.
        sft_min_steps: no stop before this step.
        sft_eval_every: probe period (steps) of the stop rule.
        sft_probe_prompts: training prompts in each probe (8 samples each at temperature 1); the last probe's
            outcomes are saved with the policy and warm-start the predictor (``predictor.warm_start``).
        sft_task_kwargs: task-loader arguments of the warm start's gold trajectories when they should differ
            from the RL pool's (``env.task_kwargs``), e.g. SFT on short expressions and RL on a wider mix. The
            stop-rule probes then use SFT prompts, and one more probe on the RL pool feeds the predictor.
            None: the RL pool's tasks.
    """

    name: str = "tiny"
    sft_steps: int = 0
    sft_lr: float = 2e-3
    sft_batch: int = 8
    sft_evals: int = 4
    require_jump: bool = True
    render_tools: bool = True
    sft_stop_success: float = 0.0
    sft_stop_mixed: float = 0.0
    sft_min_steps: int = 0
    sft_eval_every: int = 100
    sft_probe_prompts: int = 32
    sft_task_kwargs: dict[str, Any] | None = None


@dataclass(frozen=True)
class SamplingSection:
    """Rollout sampling: new tokens per turn, temperature (> 0), top-p in (0, 1], episodes in flight at once."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    max_concurrency: int = 64


@dataclass(frozen=True)
class BudgetSection:
    """Budget shape (DESIGN.md section 2): M roots, N continuations per root, n rollouts per flat prompt.

    Attributes:
        accounting: "paper" (a replay costs replay_cost) or "token" (a replay costs its expected remaining
            tokens relative to a full rollout, in integer units for the exact prefix knapsack).
        max_num_gen_batches: `dapo` only: the most batches of batch_size prompts x n rollouts one step may draw
            while filling its batch with mixed groups (verl's DAPO recipe name; docs/allocation.md); 0 = as many
            as the step's candidate pool holds (env.pool_size // batch_size).
    """

    roots: int = 32
    continuations: int = 2
    group_size: int = 8
    replay_cost: float = 0.5
    min_rollouts: int = 2
    max_rollouts: int | None = 16
    accounting: str = "paper"
    max_num_gen_batches: int = 0


@dataclass(frozen=True)
class OptimSection:
    """Policy update.

    Attributes:
        estimator: "auto" (treerpo for math/QA, tree_grpo for function calling, grpo for flat methods),
            "grpo", "tree_grpo" or "treerpo".
        normalize_std: divide by the group std (False: Dr. GRPO).
        loss_agg: "token-mean", "seq-mean-token-sum", "seq-mean-token-mean" or "seq-mean-token-sum-norm", with
            verl's meanings over the whole minibatch (`trace_rl.advantages.losses.aggregate_loss`).
        zero_advantage_rows: "count" (verl/TRL: paths with zero advantage count in the loss denominator) or
            "drop" (they are removed before the loss; `trace_rl.train.update`).
        loss_scale_tokens: the constant L of "seq-mean-token-sum-norm" (Dr. GRPO); 0 = sampling.max_new_tokens
            x env.max_turns (the most model tokens an episode can generate). Must be 0 with the other modes.
        minibatches: optimizer steps per epoch, the same for every method (paths split evenly); logged per step
            as `optimizer_steps`.
        minibatch: paths per optimizer step instead (the number of steps then grows with the paths a method
            keeps); only with minibatches: 0.
        micro_tokens: padded tokens per forward pass: each minibatch's gradient is accumulated over passes of at
            most this many (rows x longest row) tokens, the same gradient with a fraction of the activation memory
            (`trace_rl.train.update.micro_batches`); 0 = the whole minibatch in one pass.
    """

    lr: float = 5e-5
    clip: float = 0.2
    kl_coef: float = 0.0
    loss_agg: str = "token-mean"
    estimator: str = "auto"
    normalize_std: bool = True
    epochs: int = 1
    minibatch: int = 0
    max_grad_norm: float = 1.0
    micro_tokens: int = 4096
    minibatches: int = 1
    zero_advantage_rows: str = "count"
    loss_scale_tokens: int = 0


@dataclass(frozen=True)
class PredictorSection:
    """The shared success predictor (trace_rl.predictor).

    Attributes:
        name: backbone ("tiny", "minilm", a local Hugging Face path, or a convex predictor: "ngram",
            "minilm-head", "ngram+minilm"; see `trace_rl.predictor.build_predictor`).
        prefix_share: share of prefix nodes in each predictor batch (paper: about 6%).
        buffer_steps: recent steps kept in the replay buffer (the convex predictors keep every example).
        updates: predictor optimizer steps after each training step (exactly this many; the convex predictors
            refit once per step on everything they have seen).
        batch_size: examples per predictor step.
        lr: predictor learning rate (unused by the convex predictors).
        warm_start: before step 1, train the predictor on the outcomes of the policy warm start's last probe
            (training prompts; saved with the warm-started policy as probe_outcomes.json).
    """

    name: str = "tiny"
    prefix_share: float = 0.06
    buffer_steps: int = 4
    updates: int = 8
    batch_size: int = 32
    lr: float = 1e-3
    warm_start: bool = True


@dataclass(frozen=True)
class BackendSection:
    """Where rollouts are generated (docs/serving.md).

    Attributes:
        kind: "local" (the in-process LocalEngine), "vllm" (vLLM servers through a ReplicaPool) or "sglang"
            (running SGLang servers through a ReplicaPool; ``urls`` required: trace-rl launches only vLLM).
        urls: comma-separated base URLs of running servers; empty = the trainer launches ``replicas`` servers
            from .venv-vllm (``make vllm``; kind vllm only) and stops them when the run ends, also on error or
            interrupt.
        replicas: servers the trainer launches when ``urls`` is empty.
        max_in_flight: requests in flight per replica.
        dtype: dtype of launched servers ("float32": logprobs as the trainer computes them; or "bfloat16").
        threads: CPU threads per launched server (OMP_NUM_THREADS). nice: their niceness.
        kv_cache_gib: KV cache of each launched server in whole GiB (VLLM_CPU_KVCACHE_SPACE). Its capacity in
            tokens is GiB * 2**30 / (2 * layers * kv_heads * head_dim * dtype bytes): 1 GiB holds 23,296 tokens
            of SmolLM2 in fp32. A step whose roots hold more tokens than that evicts prefixes before their
            replays run (least recently used first) and lowers backend_replay_cache_hit_rate.
    """

    kind: str = "local"
    urls: str = ""
    replicas: int = 1
    max_in_flight: int = 64
    dtype: str = "float32"
    threads: int = 1
    nice: int = 0
    kv_cache_gib: int = 1


@dataclass(frozen=True)
class TrainConfig:
    """Everything one `trace-rl train` run needs; ``preset`` records where the defaults came from."""

    method: str = "trace"
    steps: int = 20
    total_budget: float = 0.0  # rollout-equivalents generated over the run; > 0 stops the run once spent
    seed: int = 0
    eval_every: int = 5
    checkpoint_every: int = 5
    threads: int = 0  # torch CPU threads; 0 = min(cores, 4). Use 1 per run when runs share a small machine.
    device: str = (
        "auto"  # the policy's torch device: "auto" (cuda when available, else cpu), "cpu", "cuda[:N]"
    )
    preset: str = "custom"
    env: EnvSection = field(default_factory=EnvSection)
    policy: PolicySection = field(default_factory=PolicySection)
    sampling: SamplingSection = field(default_factory=SamplingSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    optim: OptimSection = field(default_factory=OptimSection)
    predictor: PredictorSection = field(default_factory=PredictorSection)
    backend: BackendSection = field(default_factory=BackendSection)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def preset_names() -> list[str]:
    """Names of the shipped presets (YAML files in trace_rl/train/presets)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_config(
    *, preset: str | None = None, file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> TrainConfig:
    """Build and validate a TrainConfig from a preset or a YAML file plus ``section.key=value`` overrides.

    Raises:
        ConfigError: unknown preset/file, unknown key, wrong type or an invalid combination (one line).
    """
    if preset is not None and file is not None:
        raise ConfigError("give either a preset or a config file, not both")
    data: dict[str, Any] = {}
    if preset is not None:
        path = PRESET_DIR / f"{preset}.yaml"
        if not path.exists():
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(preset_names())})")
        data = read_yaml(path)
        data.setdefault("preset", preset)
    elif file is not None:
        path = Path(file)
        if not path.exists():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        data = read_yaml(path)
    for item in overrides:
        data = merge(data, parse_override(item))
    cfg = build(TrainConfig, data, "")
    validate(cfg)
    return cfg


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a config saved with `TrainConfig.to_dict` (used by --resume)."""
    cfg = build(TrainConfig, data, "")
    validate(cfg)
    return cfg


def with_overrides(cfg: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """``cfg`` with ``section.key=value`` overrides applied (the same parser as `load_config`), validated.

    Raises:
        ConfigError: a malformed override, an unknown key, a wrong type or an invalid combination.
    """
    data = cfg.to_dict()
    for item in overrides:
        data = merge(data, parse_override(item))
    return config_from_dict(data)


def validate(cfg: TrainConfig) -> None:
    """Check value ranges and combinations; raise ConfigError naming the first bad key."""
    from trace_rl.allocation import METHODS

    def need(ok: bool, key: str, why: str) -> None:
        if not ok:
            raise ConfigError(f"{key}: {why}")

    need(cfg.method in METHODS, "method", f"unknown method {cfg.method!r} (known: {', '.join(METHODS)})")
    need(cfg.steps >= 1, "steps", "must be at least 1")
    need(cfg.eval_every >= 0, "eval_every", "must be >= 0 (0 disables evaluation)")
    need(cfg.threads >= 0, "threads", "must be >= 0 (0 = min(cores, 4))")
    need(
        cfg.device in ("auto", "cpu") or re.fullmatch(r"cuda(:\d+)?", cfg.device) is not None,
        "device",
        f"must be auto, cpu, cuda or cuda:N, got {cfg.device!r}",
    )
    need(cfg.checkpoint_every >= 1, "checkpoint_every", "must be at least 1")
    need(cfg.env.max_turns >= 1, "env.max_turns", "must be at least 1")
    need(cfg.env.eval_tasks >= 0, "env.eval_tasks", "must be >= 0")
    need(
        math.isfinite(cfg.env.eval_temperature) and cfg.env.eval_temperature >= 0,
        "env.eval_temperature",
        "must be finite and >= 0 (0 = greedy)",
    )
    need(cfg.env.eval_samples >= 1, "env.eval_samples", "must be >= 1")
    need(
        cfg.env.eval_temperature > 0 or cfg.env.eval_samples == 1,
        "env.eval_samples",
        "must be 1 when env.eval_temperature is 0 (greedy samples are identical)",
    )
    need(cfg.policy.sft_steps >= 0, "policy.sft_steps", "must be >= 0")
    need(cfg.policy.sft_evals >= 1, "policy.sft_evals", "must be >= 1 (the last evaluation checks the jump)")
    need(cfg.policy.sft_batch >= 1, "policy.sft_batch", "must be at least 1")
    need(
        0 <= cfg.policy.sft_stop_success <= 1,
        "policy.sft_stop_success",
        "must lie in [0, 1] (0 = no stop rule)",
    )
    need(0 <= cfg.policy.sft_stop_mixed <= 1, "policy.sft_stop_mixed", "must lie in [0, 1]")
    need(cfg.policy.sft_min_steps >= 0, "policy.sft_min_steps", "must be >= 0")
    need(cfg.policy.sft_eval_every >= 1, "policy.sft_eval_every", "must be at least 1")
    need(cfg.policy.sft_probe_prompts >= 1, "policy.sft_probe_prompts", "must be at least 1")
    need(cfg.sampling.max_new_tokens >= 1, "sampling.max_new_tokens", "must be at least 1")
    need(cfg.sampling.temperature > 0, "sampling.temperature", "must be > 0 for RL sampling")
    need(0 < cfg.sampling.top_p <= 1, "sampling.top_p", "must lie in (0, 1]")
    need(cfg.sampling.max_concurrency >= 1, "sampling.max_concurrency", "must be at least 1")
    need(cfg.budget.accounting in ("paper", "token"), "budget.accounting", "must be 'paper' or 'token'")
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
        "must be auto, grpo, tree_grpo or treerpo",
    )
    need(
        cfg.optim.loss_agg
        in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
        "optim.loss_agg",
        "token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm",
    )
    need(cfg.optim.zero_advantage_rows in ("count", "drop"), "optim.zero_advantage_rows", "count or drop")
    need(
        cfg.optim.loss_scale_tokens == 0 or cfg.optim.loss_agg == "seq-mean-token-sum-norm",
        "optim.loss_scale_tokens",
        "only seq-mean-token-sum-norm uses a constant length normaliser; leave it 0",
    )
    need(cfg.optim.loss_scale_tokens >= 0, "optim.loss_scale_tokens", "must be >= 0")
    need(
        (cfg.optim.minibatches > 0) != (cfg.optim.minibatch > 0),
        "optim.minibatches",
        "set exactly one of optim.minibatches (optimizer steps per RL step, equal for every method) and "
        "optim.minibatch (paths per step); set the other to 0",
    )
    need(cfg.total_budget >= 0, "total_budget", "must be >= 0 (0: the run ends after `steps` steps)")
    need(
        cfg.budget.max_num_gen_batches >= 0,
        "budget.max_num_gen_batches",
        "must be >= 0 (0 = the pool's limit)",
    )
    need(cfg.optim.lr > 0, "optim.lr", "must be > 0")
    need(0 < cfg.optim.clip < 1, "optim.clip", "must lie in (0, 1)")
    need(cfg.optim.kl_coef >= 0, "optim.kl_coef", "must be >= 0")
    need(cfg.optim.epochs >= 1, "optim.epochs", "must be at least 1")
    need(cfg.optim.minibatch >= 0 and cfg.optim.minibatches >= 0, "optim.minibatch", "must be >= 0")
    need(
        cfg.optim.micro_tokens >= 0, "optim.micro_tokens", "must be >= 0 (0 = one forward pass per minibatch)"
    )
    need(0 <= cfg.predictor.prefix_share <= 1, "predictor.prefix_share", "must lie in [0, 1]")
    need(cfg.predictor.buffer_steps >= 1, "predictor.buffer_steps", "must be at least 1")
    need(cfg.predictor.updates >= 0, "predictor.updates", "must be >= 0")
    need(cfg.backend.kind in ("local", "vllm", "sglang"), "backend.kind", "must be local, vllm or sglang")
    need(
        cfg.backend.kind != "sglang" or any(u.strip() for u in cfg.backend.urls.split(",")),
        "backend.urls",
        "must list the running SGLang servers with backend.kind=sglang (e.g. http://host:30000,http://host:30001):"
        " trace-rl launches only vLLM servers",
    )
    need(cfg.backend.replicas >= 1, "backend.replicas", "must be at least 1")
    need(cfg.backend.max_in_flight >= 1, "backend.max_in_flight", "must be at least 1")
    need(cfg.backend.dtype in ("float32", "bfloat16"), "backend.dtype", "must be float32 or bfloat16")
    need(cfg.backend.kv_cache_gib >= 1, "backend.kv_cache_gib", "must be at least 1 (whole GiB)")
    need(
        cfg.backend.kind != "vllm" or cfg.sampling.top_p == 1,
        "sampling.top_p",
        "must be 1 with backend.kind=vllm (vLLM's logprobs after top-p are not what the trainer recomputes)",
    )


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
