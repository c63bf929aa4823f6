"""TRACE-lite for TRL's `GRPOTrainer`: a `rollout_func` and the reward function that carries tree advantages.

`GRPOTrainer` repeats every prompt `num_generations` (G) times, calls ``rollout_func(prompts, trainer)`` with the
repeated slice (TRL 1.16: G consecutive copies of each prompt) and needs exactly one completion back per entry.
It then centres rewards per group of G (``rewards.view(-1, G)``). Inside that fixed shape, `TraceRolloutFunc`:

1. collapses the slice to its P prompts (one per run of G copies) and runs trace-rl's own training step on them
   (`trace_rl.train.step.training_step`): the predictor scores the P prompts, the method's root strategy
   allocates m_i roots (m_i in {0} U [min_rollouts, cap], cap = floor(G / (1 + N)), at most `root_budget` roots in
   all), each active prompt's roots run, its turn prefixes are scored and get at most N m_i replays, and the
   predictor is updated on the new trees;
2. returns, per prompt, one row per leaf of its tree (at most (1 + N) m_i <= G) followed by padding rows: one
   end-of-turn token with ``env_mask`` 0 (no loss token) and ``trace_advantage`` None (TRL: an unscorable row,
   advantage 0, left out of the group mean). A skipped prompt (m_i = 0) is G padding rows and costs no generation;
3. hands each row's tree advantage to TRL as the reward of `trace_advantage_reward` (extra key
   ``trace_advantage``). With ``scale_rewards="none"`` TRL's advantage is reward minus the group's mean over the
   scored rows; a leaf-level estimator's advantages sum to zero over a tree's leaves (GRPO and Tree-GRPO centre
   every group they normalise), so TRL's advantage of each row equals the tree advantage (up to float32).

What this path cannot do (docs/integrations.md): a prompt never gets more than cap roots or more than G rows (root
counts cannot grow past G / (1 + N), only shrink to 0); TreeRPO's per-turn credit needs one row per turn, which the
fixed G cannot hold, so only the leaf-level estimators (grpo, tree_grpo) are accepted; evaluation
(``trainer.model.training`` False) is refused; token-aware accounting and ``trace_fresh`` are not offered (both
can buy more rows than G). `TraceRolloutWorker` for `AsyncGRPOTrainer` has none of these limits.

Budget: a step costs roots + replay_cost x replays rollout-equivalents of the P x G rows TRL allots; every record
in `TraceRolloutFunc.records` (the native step's metrics record) reports ``budget_spent`` and ``budget_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_rl.integrations.trl.parts import (
    PathRow,
    TraceSettings,
    build_step_parts,
    prompt_text,
    task_index,
    tree_advantages,
    tree_rows,
)
from trace_rl.tree import RolloutTree
from trace_rl.types import Task

ROLLOUT_FUNC_METHODS = ("trace", "treepo", "trace_root_only", "trace_prefix_only")
ADVANTAGE_KEY = "trace_advantage"
REWARD_KEY = "trace_reward"
MEAN_TOLERANCE = 1e-6


def trace_advantage_reward(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """TRL reward function: each row's tree advantage (the ``trace_advantage`` column of `TraceRolloutFunc`);
    None on padding rows. Use it as the only reward function with weight 1 and ``scale_rewards="none"``.

    Raises:
        ValueError: the column is missing (the trainer's rollout_func is not a `TraceRolloutFunc`).
    """
    values = kwargs.get(ADVANTAGE_KEY)
    if values is None or len(values) != len(completions):
        raise ValueError(f"trace_advantage_reward needs the {ADVANTAGE_KEY!r} column of trace_rollout_func")
    return [None if v is None else float(v) for v in values]


def trace_env_reward(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """TRL reward function for logging: each row's terminal environment reward (None on padding rows). Pass it
    with weight 0 next to `trace_advantage_reward` to see the success rate in TRL's logs."""
    values = kwargs.get(REWARD_KEY)
    if values is None or len(values) != len(completions):
        raise ValueError(f"trace_env_reward needs the {REWARD_KEY!r} column of trace_rollout_func")
    return [None if v is None else float(v) for v in values]


class TraceRolloutFunc:
    """A `GRPOTrainer` ``rollout_func`` running TRACE within TRL's fixed groups (module docstring).

    Attributes:
        records: one metrics record per call (`trace_rl.train.step.training_step`'s record).
        plans: per call, (P,) root counts m_i given to the prompts of the slice (0 = skipped).
        last_results: the last call's `PromptResult`s (task, tree, roots, replays), one per active prompt.
        parts: the native step's `StepParts` (predictor, online trainer, backend, codec, sampling).
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        policy: Any,
        env_factory: Callable[[], Any],
        settings: TraceSettings | None = None,
        *,
        root_budget: int | None = None,
        backend: Any = None,
    ):
        from trace_rl.allocation import get_method

        self.settings = settings or TraceSettings()
        s = self.settings
        if s.method not in ROLLOUT_FUNC_METHODS:
            raise ValueError(
                f"trace_rollout_func supports the tree methods {', '.join(ROLLOUT_FUNC_METHODS)}, not {s.method!r} "
                "(flat methods are plain GRPOTrainer; trace_fresh can return more rows than num_generations)"
            )
        if s.estimator == "treerpo":  # "auto" resolves to a leaf-level estimator here (estimator_for)
            raise ValueError(
                "trace_rollout_func cannot train TreeRPO: its per-turn advantages need one row per turn, which "
                "GRPOTrainer's fixed num_generations cannot hold; use estimator 'tree_grpo' or 'grpo', or "
                "TraceRolloutWorker with AsyncGRPOTrainer"
            )
        if root_budget is not None and root_budget < s.min_rollouts:
            raise ValueError(f"root_budget must be >= min_rollouts ({s.min_rollouts}), got {root_budget}")
        self.method = get_method(s.method)
        self.tasks = task_index(tasks)
        self.policy = policy
        self.root_budget = root_budget
        if backend is None:
            from trace_rl.rollout.engine import LocalEngine

            backend = LocalEngine(policy, max_batch=s.max_concurrency)
        self._trees: list[RolloutTree] = []
        self.parts = build_step_parts(policy, backend, env_factory, s, self._keep_trees)
        self.rng = np.random.default_rng(s.seed)
        self.records: list[dict[str, Any]] = []
        self.plans: list[np.ndarray] = []
        self.last_results: list[Any] = []
        self._last_step: int | None = None

    def _keep_trees(self, trees: list[RolloutTree]) -> dict[str, float]:
        self._trees = list(trees)  # TRL updates the policy; the step only hands its trees over
        return {}

    # ------------------------------------------------------------------------------------------------ call
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Roll out the slice TRL hands over; returns TRL's rollout dict with one row per entry of ``prompts``.

        Raises:
            ValueError: the trainer is in evaluation mode or misconfigured (`check_trainer`), the slice is not
                runs of num_generations copies, a prompt matches no task, or the root budget does not fit.
        """
        from trace_rl.allocation import BudgetShape
        from trace_rl.train.step import training_step

        self.check_trainer(trainer)
        g = int(trainer.num_generations)
        groups = _groups(prompts, g)
        pool = [self._task(p) for p in groups]
        s = self.settings
        cap = g // (1 + s.continuations)
        if s.max_rollouts is not None:
            cap = min(cap, s.max_rollouts)
        if cap < s.min_rollouts:
            raise ValueError(
                f"num_generations={g} leaves room for at most {g // (1 + s.continuations)} roots per prompt with "
                f"N={s.continuations} replays per root; need at least min_rollouts={s.min_rollouts}: raise "
                "num_generations or lower continuations"
            )
        budget = len(pool) * cap if self.root_budget is None else self.root_budget
        budget -= budget % cap  # roots must be a multiple of the uniform methods' group (cap)
        if budget > len(pool) * cap or budget < cap:
            raise ValueError(
                f"root_budget={self.root_budget} does not fit {len(pool)} prompts x at most {cap} roots "
                f"(a multiple of {cap} between {cap} and {len(pool) * cap})"
            )
        shape = BudgetShape(
            roots=budget,
            continuations=s.continuations,
            group_size=cap,
            replay_cost=s.replay_cost,
            min_rollouts=s.min_rollouts,
            max_rollouts=cap,
        )
        step = int(trainer.state.global_step)
        if self._last_step is not None and step != self._last_step:
            clear = getattr(self.parts.backend, "clear_cache", None)
            if callable(clear):
                clear()  # cached keys/values belong to the weights before the last optimizer step
        self._last_step = step
        self._trees = []
        record, results = training_step(step, pool, self.method, shape, self.parts, self.rng)
        self.records.append(record)
        self.last_results = list(results)
        out = self._generation_rows(pool, results, g)
        self.plans.append(out.pop("_roots"))  # type: ignore[arg-type]
        return out

    def check_trainer(self, trainer: Any) -> None:
        """Refuse trainer settings under which TRL's advantages would not be the tree advantages.

        Raises:
            ValueError: evaluation mode, several processes, ``scale_rewards`` other than "none", aggregation other than
                "sum_then_normalize", or reward weights other than 1 on `trace_advantage_reward` and 0 elsewhere.
        """
        if not trainer.model.training:
            raise ValueError(
                "trace_rollout_func runs training steps only; set eval_strategy='no' (evaluate with "
                "trace-rl's evaluation or a separate GRPOTrainer without rollout_func)"
            )
        accelerator = getattr(trainer, "accelerator", None)
        if accelerator is not None and int(accelerator.num_processes) != 1:
            raise ValueError(
                "trace_rollout_func needs one training process: with several, TRL spreads a prompt's "
                f"num_generations copies over the processes ({accelerator.num_processes}), so no process holds a "
                "whole group to build a tree from"
            )
        if getattr(trainer, "scale_rewards", "none") != "none":
            raise ValueError(
                f"trace_rollout_func needs GRPOConfig(scale_rewards='none') (got {trainer.scale_rewards!r}): "
                "tree advantages are already normalised and must reach the loss unchanged"
            )
        if getattr(trainer, "multi_objective_aggregation", "sum_then_normalize") != "sum_then_normalize":
            raise ValueError("trace_rollout_func needs multi_objective_aggregation='sum_then_normalize'")
        funcs = list(getattr(trainer, "reward_funcs", []))
        weights = [float(w) for w in getattr(trainer, "reward_weights", [1.0] * len(funcs))]
        ours = [i for i, f in enumerate(funcs) if f is trace_advantage_reward]
        if (
            len(ours) != 1
            or weights[ours[0]] != 1.0
            or any(w != 0.0 for i, w in enumerate(weights) if i != ours[0])
        ):
            raise ValueError(
                "trace_rollout_func needs trace_advantage_reward as a reward function with weight 1 and every other "
                "reward function (e.g. trace_env_reward for logging) with weight 0"
            )

    # ------------------------------------------------------------------------------------------- helpers
    def _task(self, prompt: Any) -> Task:
        text = prompt_text(prompt)
        task = self.tasks.get(text)
        if task is None:
            raise ValueError(f"prompt {text[:80]!r} matches none of the rollout function's tasks")
        return task

    def _generation_rows(self, pool: list[Task], results: list[Any], g: int) -> dict[str, Any]:
        """TRL's ``num_generations`` = ``g`` rows per prompt of ``pool``, as rollout_func's output columns: one row
        per root-to-leaf path of its tree (`tree_rows`), then masked padding rows; ``_roots`` holds each prompt's
        m_i."""
        by_task: dict[str, list[Any]] = {}
        for r in results:  # a prompt repeated in one slice is one task: hand its trees out in order
            by_task.setdefault(r.task.id, []).append(r)
        out: dict[str, list[Any]] = {
            k: []
            for k in (
                "prompt_ids",
                "completion_ids",
                "logprobs",
                "env_mask",
                ADVANTAGE_KEY,
                REWARD_KEY,
                "trace_node",
                "trace_is_replay",
            )
        }
        roots = np.zeros(len(pool), np.int64)
        pad_id = _pad_id(self.policy)
        for i, task in enumerate(pool):
            queue = by_task.get(task.id, [])
            result = queue.pop(0) if queue else None
            rows: list[PathRow] = []
            if result is not None and result.tree.num_leaves > 0:
                roots[i] = len(result.roots) - int(
                    result.fresh
                )  # m_i (fresh rollouts bought by the budget excluded)
                tree = result.tree
                adv = tree_advantages(tree, self.settings.estimator_for(task, node_level=False))
                rows = tree_rows(tree, adv)
                mean = float(np.mean([row.advantage for row in rows]))
                if abs(mean) > MEAN_TOLERANCE:
                    raise RuntimeError(
                        f"tree advantages of task {task.id!r} do not sum to zero (mean {mean:.3g})"
                    )
                if len(rows) > g:
                    raise RuntimeError(
                        f"task {task.id!r} has {len(rows)} leaves, more than num_generations={g}"
                    )
                for row in rows:
                    out["prompt_ids"].append(row.prompt_ids.tolist())
                    out["completion_ids"].append(row.completion_ids.tolist())
                    out["logprobs"].append(row.logprobs.astype(float).tolist())
                    out["env_mask"].append(row.completion_mask.astype(int).tolist())
                    out[ADVANTAGE_KEY].append(row.advantage)
                    out[REWARD_KEY].append(row.reward)
                    out["trace_node"].append(row.node)
                    out["trace_is_replay"].append(bool(tree.is_replay[row.node]))
            prompt_ids = (
                rows[0].prompt_ids.tolist()
                if rows
                else list(self.parts.codec.prompt_ids(task.prompt, task.tools))
            )
            for _ in range(g - len(rows)):  # padding: one masked token, unscorable
                out["prompt_ids"].append(prompt_ids)
                out["completion_ids"].append([pad_id])
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
                out[ADVANTAGE_KEY].append(None)
                out[REWARD_KEY].append(None)
                out["trace_node"].append(-1)
                out["trace_is_replay"].append(False)
        out["_roots"] = roots  # type: ignore[assignment]
        return out


def trace_rollout_func(
    tasks: Sequence[Task],
    policy: Any,
    env_factory: Callable[[], Any],
    settings: TraceSettings | None = None,
    *,
    root_budget: int | None = None,
    backend: Any = None,
) -> TraceRolloutFunc:
    """A `GRPOTrainer` ``rollout_func`` that runs TRACE inside TRL's fixed groups (module docstring).

    Args:
        tasks: the trace-rl tasks behind the trainer's dataset (`tasks_dataset_rows` builds that dataset);
            prompts are matched to tasks by their user text.
        policy: the `trace_rl.policy.Policy` TRL trains: pass ``policy.model`` and ``policy.tokenizer`` to
            `GRPOTrainer` too, so that generation always uses the weights being trained.
        env_factory: makes a fresh trace-rl environment (e.g. ``lambda: make_env("math_python")``).
        settings: TRACE's knobs (`TraceSettings`; method one of "trace", "treepo", "trace_root_only",
            "trace_prefix_only"; estimator "auto", resolved to tree_grpo here, "tree_grpo" or "grpo").
        root_budget: root rollouts per call over the P prompts of the slice (rounded down to a multiple of
            cap = floor(G / (1 + N))); None: P x cap (no prompt skipped for lack of budget).
        backend: a trace-rl generation backend; default `LocalEngine(policy)`.

    Raises:
        ValueError: an unsupported method or estimator, duplicate prompt texts, or a bad root_budget.
    """
    return TraceRolloutFunc(tasks, policy, env_factory, settings, root_budget=root_budget, backend=backend)


def _groups(prompts: Sequence[Any], g: int) -> list[Any]:
    """The prompt of each run of g consecutive equal entries (TRL's RepeatSampler order).

    Raises:
        ValueError: the slice is not whole runs of g equal prompts.
    """
    if g < 1 or len(prompts) % g:
        raise ValueError(f"rollout_func got {len(prompts)} prompts, not a multiple of num_generations={g}")
    groups = []
    for start in range(0, len(prompts), g):
        run = prompts[start : start + g]
        if any(p != run[0] for p in run[1:]):
            raise ValueError(
                "rollout_func expects each prompt repeated num_generations times in a row (TRL's RepeatSampler); "
                f"entries {start}..{start + g - 1} differ"
            )
        groups.append(run[0])
    return groups


def _pad_id(policy: Any) -> int:
    tok = policy.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    if pad is None:
        raise ValueError("the policy's tokenizer has neither a pad nor an eos token for padding rows")
    return int(pad)
