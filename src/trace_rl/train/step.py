"""One TRACE training step (DESIGN.md section 1), with the method's strategies passed in as arguments.

    1. score the candidate pool with the predictor                         -> v_i
    2. allocate root rollouts with the method's root strategy              -> m_i (0 = skip)
    3. per prompt, as soon as ITS roots return: score its anchors, q_j = r_j V_j + (1-r_j)(1-V_j),
       allocate replays with the method's prefix strategy (local budget N m_i), replay from save points
    4. refresh the predictor on the bottom-up targets of the new trees
    5. update the policy with a tree-aware estimator on the trees

Baselines are the same step with other strategies (`trace_rl.allocation.METHODS`). `dapo` (dynamic sampling)
repeats stages 2-3 over prompts not drawn yet until its batch holds batch_size mixed groups or it has drawn
``max_gen_batches`` batches; it trains on the mixed groups only, and every rollout it generated counts as spent.
Until the predictor has been
updated once (cold start) its estimates are only a prior, so methods that use it fall back to uniform
allocation: flat methods to GRPO's random batch, tree methods to TreePO's uniform roots and random anchors.

The record's fields are computed in `trace_rl.train.step_record` (`replay_flips` and `fresh_rollouts_on_mixed`
stay importable from here); TRACE's settings come with the parts (`StepParts.spec`, `trace_rl.spec`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trace_rl.allocation import SIBLING_WEIGHT, UNITS_PER_ROLLOUT, BudgetShape, Method, trace_prefixes
from trace_rl.allocation.adaptive import AdaptiveState, adaptive_roots
from trace_rl.errors import DataError
from trace_rl.metrics import (
    is_effective,
    replay_depth_histogram,
)
from trace_rl.predictor.capabilities import as_group_aware, as_state_aware, example_weighting
from trace_rl.predictor.consensus import examples_consensus
from trace_rl.predictor.examples import node_examples
from trace_rl.predictor.policy_state import node_contexts
from trace_rl.predictor.serialize import serialize_anchor
from trace_rl.rollout.expansion import PromptResult, ReplayAllocator
from trace_rl.rollout.scheduler import run_plan
from trace_rl.spec import TraceSpec
from trace_rl.train.prefixes import anchor_values, effective_method, prefix_budget, replay_allocator
from trace_rl.train.selection import observe_adaptive, selection_fields
from trace_rl.train.step_record import fresh_rollouts_on_mixed as fresh_rollouts_on_mixed
from trace_rl.train.step_record import predictor_fields, replay_flips, step_counts
from trace_rl.tree import RolloutTree
from trace_rl.types import RootPlan, Task

__all__ = [
    "UNITS_PER_ROLLOUT",
    "StepParts",
    "anchor_values",
    "effective_method",
    "fresh_rollouts_on_mixed",
    "gen_batch_cap",
    "prefix_callback",
    "prefix_objective_applies",
    "replay_flips",
    "training_step",
]


@dataclass
class StepParts:
    """What a step needs besides the method: engines, environment, predictor, the policy update and TRACE's
    settings.

    Attributes:
        backend: generation backend (e.g. `trace_rl.rollout.engine.LocalEngine`).
        env_factory: makes a fresh environment (Env protocol).
        codec: chat codec of the policy's tokenizer.
        sampling: `trace_rl.rollout.backends.SamplingParams`.
        predictor: a `SuccessPredictor` (predict / update / is_warm); its texts are serialized at its own
            ``max_chars``, and it gets the hand-overs of the capabilities it declares (``state``, ``group``:
            `trace_rl.predictor.capabilities`).
        online: the predictor's `OnlineTrainer` (observe_step after each step).
        update_policy: callable(trees) -> dict of update metrics (runs the optimizer).
        spec: the run's `trace_rl.spec.TraceSpec`: episode and scheduler limits (``max_turns``,
            ``sampling.max_concurrency``), the accounting, `dapo`'s draw cap (``budget.max_num_gen_batches``; 0:
            the pool's batches), the prefix stage's options (``prefix``: its objective applies to the methods whose
            prefix strategy is `trace_prefixes`, docs/allocation.md) and `trace_adaptive`'s coverage and root value
            normalisation (``budget.coverage``, ``update.normalize_std``).
        adaptive: `trace_adaptive`'s measurements of earlier steps (None for the other methods).
    """

    backend: Any
    env_factory: Callable[[], Any]
    codec: Any
    sampling: Any
    predictor: Any
    online: Any
    update_policy: Callable[[list[RolloutTree]], dict[str, float]]
    spec: TraceSpec = field(default_factory=TraceSpec)
    adaptive: AdaptiveState | None = None
    timers: dict[str, float] = field(default_factory=dict)

    def tick(self, key: str, seconds: float) -> None:
        self.timers[key] = self.timers.get(key, 0.0) + seconds


def prefix_callback(
    method: Method,
    parts: StepParts,
    shape: BudgetShape,
    prompt_rngs: Mapping[str, np.random.Generator],
) -> ReplayAllocator:
    """The scheduler's per-prompt replay allocator: `trace_rl.train.prefixes.replay_allocator` on the step's
    predictor, accounting and per-prompt generators.

    ``prompt_rngs`` maps each task id to its own generator (drawn in pool order before the rollouts start):
    prompts finish in an order that depends on generation and tool timing, so a shared generator would hand
    different draws to different prompts from run to run. Budgets and costs are in the units of
    `trace_rl.train.prefixes.prefix_budget` (replays under "paper" accounting; integer cost units under "token"
    accounting or a fresh anchor, where a replay from anchor j costs ceil(U * remaining_j / mean rollout
    tokens), remaining_j being the model tokens the original rollout generated after anchor j).

    ``parts.spec.prefix`` applies to a method whose prefix strategy is `trace_prefixes` (the configured method
    is checked by the spec); the cold-start fallback (TreePO's random anchors, `effective_method`) has none.
    """
    prefix = parts.spec.prefix
    contrast = prefix.prefix_objective == "contrast" and prefix_objective_applies(method)
    return replay_allocator(
        method,
        parts.predictor,
        replay_cost=shape.replay_cost,
        accounting=parts.spec.budget.accounting,
        rng_of=lambda task: prompt_rngs[task.id],
        tick=parts.tick,
        objective="contrast" if contrast else "paper",
        sibling_weight=prefix.sibling_weight if contrast else SIBLING_WEIGHT,
        state_evidence=prefix.state_evidence and prefix_objective_applies(method),
    )


def prefix_objective_applies(method: Method) -> bool:
    """Whether ``budget.prefix_objective`` can change ``method``'s replays: its prefix strategy is `trace_prefixes`."""
    return method.prefixes is trace_prefixes and method.tail_prefixes is None


def _tool_seconds(factory: Any) -> float:
    """Cumulative env.step seconds of a `TimedEnvFactory` (0 for plain factories)."""
    return float(getattr(factory, "seconds", 0.0))


def training_step(
    step: int,
    pool: Sequence[Task],
    method: Method,
    shape: BudgetShape,
    parts: StepParts,
    rng: np.random.Generator,
    *,
    budget_left: float | None = None,
) -> tuple[dict[str, Any], list[PromptResult]]:
    """Run one step of ``method`` on a candidate pool; returns (metrics record, per-prompt results trained on).

    ``budget_left`` (rollout-equivalents left in the run's total budget; None = no limit) caps what a `dapo`
    step may draw: it never starts a draw that would overspend it. The other methods spend their fixed step
    budget.

    Raises:
        ValueError: from the strategies (e.g. a pool smaller than the batch size).
    """
    parts.timers = {}
    t_start = time.perf_counter()

    # 1. score the candidate pool
    t0 = time.perf_counter()
    warm = bool(parts.predictor.is_warm)
    prompt_texts = [serialize_anchor(t.prompt, [], max_chars=parts.predictor.max_chars) for t in pool]
    v = parts.predictor.predict(prompt_texts)
    parts.tick("predictor", time.perf_counter() - t0)
    used = effective_method(method, warm)

    # 2.-3. allocate roots, run them, then per-prompt prefix expansion as soon as that prompt's roots return
    draws = 1
    adaptive_info: dict[str, float] = {}
    if used.dynamic_sampling:
        generated, results, draws = _dynamic_sampling(pool, used, shape, parts, rng, budget_left)
        plan_active = sum(len(r.roots) > 0 for r in generated)
    else:
        plan = _root_plan(v, used, shape, parts, rng)
        prompt_rngs = _prompt_rngs(pool, rng)
        results = _run_roots_and_prefixes(plan, pool, used, shape, parts, rng, prompt_rngs)
        generated = results
        plan_active = plan.num_active
        adaptive_info = {f"adaptive_{k}": float(x) for k, x in plan.info.items()} if used.adaptive else {}
    trees = [r.tree for r in results]

    # 4. refresh the predictor on the bottom-up targets
    t0 = time.perf_counter()
    max_chars = parts.predictor.max_chars
    weighting = example_weighting(parts.predictor)
    per_tree = [
        node_examples(r.tree, r.task.prompt, max_chars=max_chars, weighting=weighting) for r in generated
    ]
    examples = [ex for exs in per_tree for ex in exs]
    if (stateful := as_state_aware(parts.predictor)) is not None:  # the token context of every node text
        for r in generated:
            if r.roots:
                stateful.register_contexts(
                    *node_contexts(r.tree, r.task.prompt, r.roots[0].prompt_ids, max_chars=max_chars)
                )
    if (grouped := as_group_aware(parts.predictor)) is not None:  # the sibling consensus of every node text
        for r, exs in zip(generated, per_tree, strict=True):
            grouped.register_group(*examples_consensus(r.tree, exs))
    pred_metrics = parts.online.observe_step(examples) if examples else {}
    parts.tick("predictor", time.perf_counter() - t0)

    # 5. update the policy on the trees
    t0 = time.perf_counter()
    update_metrics = parts.update_policy(
        trees
    )  # no trees (a dapo step that filled nothing): zero-gradient steps
    parts.tick("update", time.perf_counter() - t0)

    wall = time.perf_counter() - t_start
    record: dict[str, Any] = {
        "step": step,
        "method": method.name,
        "allocation": used.name,
        # the prefix stage's objective this step ("contrast" only where it applies: not at cold start)
        "prefix_objective": (
            parts.spec.prefix.prefix_objective
            if prefix_objective_applies(used) and used.has_replays
            else "paper"
        ),
        "state_evidence": float(
            parts.spec.prefix.state_evidence and prefix_objective_applies(used) and used.has_replays
        ),
        "predictor_warm": float(warm),
        **step_counts(
            generated, trees, update_metrics, plan_active, len(pool), draws, shape, parts.spec.max_turns
        ),
        "wall_s": wall,
        **{
            f"time_{k}_s": parts.timers.get(k, 0.0)
            for k in ("generation", "tools", "predictor", "allocation", "update")
        },
    }
    record.update(replay_flips(generated))
    record.update(selection_fields(pool, v, generated))  # predictor ranking and selection drift (issue 58)
    record.update(adaptive_info)
    if parts.adaptive is not None:  # trace_adaptive: what this step measured, for the next steps' allocation
        observe_adaptive(parts.adaptive, pool, v, generated, record, estimates_used=used.adaptive)
    record["predictor_share"] = record["time_predictor_s"] / wall if wall > 0 else 0.0
    record.update(predictor_fields(pred_metrics))
    record["predictor_warm"] = float(
        warm
    )  # the state the allocation used (the online trainer reports it after training)
    record.update({f"update_{k}": v for k, v in update_metrics.items()})
    if record["replays"]:
        record["replay_depth_histogram"] = replay_depth_histogram([r.tree for r in generated]).tolist()
    return record, results


def _root_plan(
    v: np.ndarray, used: Method, shape: BudgetShape, parts: StepParts, rng: np.random.Generator
) -> RootPlan:
    """Stage 2: the method's root allocation of the scored pool, each prompt's replay budget in the prefix
    allocator's units (replays, or integer cost units under token accounting or a fresh anchor)."""
    t0 = time.perf_counter()
    plan: RootPlan
    if not used.adaptive:
        plan = used.roots(v, shape, rng)
    elif parts.adaptive is None:
        raise ValueError(f"method {used.name} needs StepParts.adaptive, the run's AdaptiveState")
    else:
        plan = adaptive_roots(
            v,
            shape,
            rng,
            parts.adaptive,
            coverage=parts.spec.budget.coverage,
            normalize_std=parts.spec.update.normalize_std,
        )
    # local budgets in the allocator's units: replays, or integer cost units (token accounting, fresh anchor)
    budgets = [
        prefix_budget(float(x), shape.replay_cost, method=used, accounting=parts.spec.budget.accounting)[0]
        for x in plan.replay_budget
    ]
    plan = dataclasses.replace(plan, replay_budget=np.asarray(budgets, dtype=np.float64))
    parts.tick("allocation", time.perf_counter() - t0)
    return plan


def _run_roots_and_prefixes(
    plan: RootPlan,
    pool: Sequence[Task],
    used: Method,
    shape: BudgetShape,
    parts: StepParts,
    rng: np.random.Generator,
    prompt_rngs: Mapping[str, np.random.Generator],
) -> list[PromptResult]:
    """Stage 3 of one root plan: roots, then each prompt's prefix expansion as soon as its roots return;
    generation, tool and in-step predictor/allocation seconds go to ``parts.timers``."""
    t0 = time.perf_counter()
    inside0 = parts.timers.get("predictor", 0.0) + parts.timers.get("allocation", 0.0)
    tools0 = _tool_seconds(parts.env_factory)
    results = asyncio.run(
        run_plan(
            plan,
            list(pool),
            parts.backend,
            parts.env_factory,
            parts.codec,
            parts.sampling,
            prefix_callback(used, parts, shape, prompt_rngs),
            max_turns=parts.spec.max_turns,
            max_concurrency=parts.spec.sampling.max_concurrency,
            replay_cost=shape.replay_cost,
            unit=prefix_budget(0, shape.replay_cost, method=used, accounting=parts.spec.budget.accounting)[1],
            seed=int(rng.integers(2**31)),
            tree_factory=lambda ids, meta: RolloutTree.new(prompt_ids=ids, meta=meta),
            fresh_anchor=used.fresh,
        )
    )
    inside = parts.timers.get("predictor", 0.0) + parts.timers.get("allocation", 0.0) - inside0
    tools = _tool_seconds(parts.env_factory) - tools0
    parts.tick("tools", tools)
    # rollout wall time with no tool call running (tool calls overlap generation in worker threads)
    parts.tick("generation", max(time.perf_counter() - t0 - inside - tools, 0.0))
    return results


def _prompt_rngs(pool: Sequence[Task], rng: np.random.Generator) -> dict[str, np.random.Generator]:
    """One generator per prompt, drawn in pool order before the rollouts start (see `prefix_callback`).

    Raises:
        ValueError: a task id appears twice in the pool (its copies would share one generator and draw in
            completion order; `trace_rl.train.data.DataCursor` never draws such a pool).
    """
    ids = [t.id for t in pool]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise DataError(
            f"the candidate pool holds task {twice[0]!r} more than once: a pool holds distinct tasks"
        )
    return {
        t.id: np.random.default_rng(int(x))
        for t, x in zip(pool, rng.integers(2**63 - 1, size=len(pool)), strict=True)
    }


def _dynamic_sampling(
    pool: Sequence[Task],
    used: Method,
    shape: BudgetShape,
    parts: StepParts,
    rng: np.random.Generator,
    budget_left: float | None,
) -> tuple[list[PromptResult], list[PromptResult], int]:
    """DAPO dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2; verl's DAPO recipe, NeMo-RL).

    Draw batches of ``shape.batch_size`` prompts not drawn yet this step (uniformly at random from the pool),
    ``shape.group_size`` rollouts each; keep the groups whose rewards are mixed; stop once ``batch_size`` mixed
    groups are kept, `gen_batch_cap` batches were drawn, the pool has no full batch left, or the next
    draw would overspend ``budget_left``. The kept groups are cut to ``batch_size`` (verl keeps the first
    train_batch_size groups). Where verl raises once its cap is reached, this step trains on what it filled
    (a run must not stop halfway); every rollout generated, kept or dropped, is spent.

    Returns:
        (every group generated, the groups trained on, the number of batches drawn).
    """
    batch, n = shape.batch_size, shape.group_size
    order = rng.permutation(len(pool))
    prompt_rngs = _prompt_rngs(pool, rng)
    generated: list[PromptResult] = []
    kept: list[PromptResult] = []
    draws = 0
    spent = 0.0
    cap = gen_batch_cap(parts.spec, len(pool), batch)
    while len(kept) < batch and draws < cap and (draws + 1) * batch <= len(pool):
        if budget_left is not None and spent + batch * n > budget_left + 1e-9:
            break
        rollouts = np.zeros(len(pool), dtype=np.int64)
        rollouts[order[draws * batch : (draws + 1) * batch]] = n
        plan = RootPlan(rollouts=rollouts, replay_budget=np.zeros(len(pool)), method=used.name)
        results = _run_roots_and_prefixes(plan, pool, used, shape, parts, rng, prompt_rngs)
        draws += 1
        spent += sum(r.spent for r in results)
        generated.extend(results)
        kept.extend(r for r in results if is_effective(r.tree))
    return generated, kept[:batch], draws


def gen_batch_cap(spec: TraceSpec, pool_size: int, batch_size: int) -> int:
    """`dapo`'s cap on the batches of ``batch_size`` prompts one step draws: ``budget.max_num_gen_batches``, or
    (0) every full batch of a pool of ``pool_size`` prompts."""
    return spec.budget.max_num_gen_batches or pool_size // batch_size
