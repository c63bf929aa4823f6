"""The TRACE replay allocator: score one prompt's anchors with the predictor and allocate its replays.

`replay_allocator(method, predictor, ...)` builds the `trace_rl.rollout.expansion.ReplayAllocator` that
`expand_prompt` calls once per prompt, after its roots: the one copy used by the native trainer
(`trace_rl.train.step`), the verl worker (`trace_rl.integrations.verl.worker`) and any other driver.

    texts_j = serialize_anchor(prompt, turns up to anchor j, predictor.max_chars)  predictor texts
    V_j     = predictor.predict(texts)        (trace_fresh: Beta posterior given the rollouts below, anchor_values)
    q_j     = r_j V_j + (1 - r_j)(1 - V_j)                                       repeat probability (paper eq. for q)
    cost_j  = replay_cost * U units (paper) | token-aware units (token) | U for the depth-0 anchor
    k       = method.prefixes(q, budget, rng, cost)                              the method's PrefixStrategy
              (tail branching, ``method.tail_prefixes``: from `tail_anchors`, no predictor;
               objective "contrast": `contrast_prefixes`, also told whether the roots are unanimous)

`prefix_budget` gives a prompt's budget in the allocator's units: N m_i replays (paper accounting, no fresh
anchor; unit = replay_cost) or N m_i replay_cost U integer units (token accounting or ``trace_fresh``;
U = `units_per_rollout(replay_cost)`, unit = 1 / U), so what the allocator prices and what the step charges agree.
`effective_method` is the cold-start rule.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trace_rl.allocation import (
    METHODS,
    PREFIX_OBJECTIVES,
    SIBLING_WEIGHT,
    Method,
    allocate_prefixes,
    contrast_prefixes,
    repeat_probability,
    tail_anchors,
    token_aware_costs,
    trace_prefixes,
    units_per_rollout,
)
from trace_rl.predictor import posterior_mean
from trace_rl.predictor.capabilities import (
    as_group_aware,
    as_history_posterior,
    as_state_aware,
    check_capabilities,
)
from trace_rl.predictor.consensus import same_state_outcomes, sibling_consensus
from trace_rl.predictor.examples import leaf_counts
from trace_rl.predictor.names import GROUP_WITH_EVIDENCE
from trace_rl.predictor.serialize import serialize_anchor
from trace_rl.rollout.agent import SavePoint
from trace_rl.rollout.expansion import PrefixChoice, ReplayAllocator
from trace_rl.tree import RolloutTree
from trace_rl.types import Anchor, Task

ACCOUNTINGS = ("paper", "token")
#: Prior strength (pseudo-trials) of `anchor_values`' Beta posterior for a predictor without a history posterior.
PRIOR_TRIALS = 4.0


def effective_method(method: Method, predictor_warm: bool) -> Method:
    """The cold-start rule: before the first predictor update, predictor-driven methods allocate uniformly."""
    if predictor_warm or not method.uses_predictor:
        return method
    return METHODS["treepo"] if method.has_replays else METHODS["grpo"]


def priced(method: Method, accounting: str) -> bool:
    """Whether the prefix budget is in integer cost units (token accounting, or a fresh anchor costing 1)."""
    if accounting not in ACCOUNTINGS:
        raise ValueError(f"accounting must be one of {ACCOUNTINGS}; got {accounting!r}")
    return accounting == "token" or method.fresh


def prefix_budget(
    replays: int | float, replay_cost: float, *, method: Method, accounting: str
) -> tuple[int, float]:
    """A prompt's prefix budget in the allocator's units, and what one unit is worth in rollout-equivalents.

    Args:
        replays: N * m_i, the prompt's replay budget counted in replays (>= 0).
        replay_cost: rollout-equivalents per replay (paper: 0.5).

    Returns:
        (budget, unit): (N m_i, replay_cost) when unpriced; (N m_i * replay_cost * U, 1 / U) when `priced`,
        U = `units_per_rollout(replay_cost)`: exact integers, budget * unit = N m_i replay_cost either way.

    Raises:
        ValueError: unknown accounting, or a replay_cost no integer unit prices exactly.
    """
    if not priced(method, accounting):
        return int(np.floor(float(replays) + 1e-9)), float(replay_cost)
    u = units_per_rollout(replay_cost)
    per_replay = round(replay_cost * u)
    return int(np.floor(float(replays) + 1e-9)) * per_replay, 1.0 / u


def replay_allocator(
    method: Method,
    predictor: Any,
    *,
    replay_cost: float,
    accounting: str = "paper",
    rng_of: Callable[[Task], np.random.Generator],
    max_per_prefix: int | None = None,
    tick: Callable[[str, float], None] | None = None,
    objective: str = "paper",
    sibling_weight: float = SIBLING_WEIGHT,
    state_evidence: bool = False,
) -> ReplayAllocator:
    """The per-prompt replay allocator of ``method`` (module doc): anchors -> `PrefixChoice` (k, cost, V).

    Args:
        method: the (already cold-start resolved, `effective_method`) method; its ``prefixes`` is the
            `trace_rl.allocation.PrefixStrategy`, its ``fresh`` flag turns on the `anchor_values` posterior.
        predictor: a `trace_rl.predictor.SuccessPredictor` or any object with its ``max_chars`` (the texts'
            serialization budget), ``capabilities`` and ``predict(texts) -> float array``; the members of the
            ``posterior`` capability and ``predict`` may return awaitables (a remote actor). It gets the
            hand-overs of the ``state`` and ``group`` capabilities it declares (`trace_rl.predictor.capabilities`).
        replay_cost, accounting: as in `prefix_budget` (the budget handed in must come from it).
        rng_of: each prompt's own generator (prompts finish in timing-dependent order: a shared generator
            would hand different draws to different prompts from run to run).
        max_per_prefix: cap on k_j (None: none); only with `allocate_prefixes`-based methods.
        tick: ``tick(key, seconds)`` wall-clock accounting ("predictor", "allocation"); None to skip.
        objective: "paper" (the method's own prefix strategy: for TRACE, sum_j 1 - q_j^k_j) or "contrast"
            (`contrast_prefixes`: the tree term for a prompt whose roots are unanimous plus ``sibling_weight``
            times the sibling terms; docs/allocation.md); "contrast" only with an `allocate_prefixes` method.
        sibling_weight: weight of the contrast objective's sibling terms (finite, >= 0).
        state_evidence: value every anchor by the predictor's posterior given the root rollouts in its
            environment state (`anchor_values` with ``same_state=True``; budget.state_evidence), not only with
            ``method.fresh``.

    Raises:
        TypeError: the predictor's declared capabilities do not hold (`check_capabilities`).
        ValueError: ``max_per_prefix`` or ``objective="contrast"`` with a method whose prefix strategy is not
            `trace_prefixes` (a setting that would not take effect), an unknown objective, a sibling weight with
            the paper's objective, ``state_evidence`` with such a method or with a predictor whose features already
            hold the state's outcomes (``reads_state_outcomes``: ngram+minilm+group), or from `prefix_budget`'s
            checks.
    """
    check_capabilities(predictor)
    max_chars = predictor.max_chars
    stateful, grouped = as_state_aware(predictor), as_group_aware(predictor)
    is_priced = priced(method, accounting)
    u = units_per_rollout(replay_cost) if is_priced else 1
    strategy = method.prefixes
    tail = method.tail_prefixes  # tail branching (branpo) reads where anchors lie, not the predictor
    if objective not in PREFIX_OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(PREFIX_OBJECTIVES)}; got {objective!r}")
    if objective == "contrast" and (method.prefixes is not trace_prefixes or tail is not None):
        raise ValueError(
            f"the contrast objective replaces allocate_prefixes; {method.name!r} does not use it"
        )
    if objective == "paper" and sibling_weight != SIBLING_WEIGHT:
        raise ValueError("sibling_weight applies to the contrast objective only")
    if state_evidence and (method.prefixes is not trace_prefixes or tail is not None):
        raise ValueError(f"state_evidence values allocate_prefixes' anchors; {method.name!r} does not use it")
    if state_evidence and grouped is not None and grouped.reads_state_outcomes:
        raise ValueError(f"predictor {predictor.name!r}: {GROUP_WITH_EVIDENCE}")
    cap: int | None = None
    if max_per_prefix is not None:
        if method.prefixes is not trace_prefixes or tail is not None:
            raise ValueError(f"max_per_prefix needs an allocate_prefixes method, not {method.name!r}")
        cap = int(max_per_prefix)

        def strategy(q: Any, budget: int, rng: np.random.Generator, cost: Any = None) -> Any:
            return allocate_prefixes(q, budget, cost=cost, max_per_prefix=cap)

    async def allocate(
        task: Task,
        tree: RolloutTree,
        anchors: Sequence[Anchor],
        points: Sequence[SavePoint | None],
        budget: int,
    ) -> PrefixChoice:
        t0 = time.perf_counter()
        values = np.full(len(anchors), np.nan)
        if tail is None:
            texts = [
                serialize_anchor(task.prompt, _history(tree, a.node), max_chars=max_chars) for a in anchors
            ]
            if stateful is not None:  # a state-aware predictor reads the save points' ids
                saved = [(t, p.token_ids) for t, p in zip(texts, points, strict=True) if p is not None]
                stateful.register_contexts([t for t, _ in saved], [ids for _, ids in saved])
            if grouped is not None:  # a group-aware one reads the tree's other roots
                grouped.register_group(texts, sibling_consensus(tree, [a.node for a in anchors], keys=texts))
            values = np.asarray(await _maybe(predictor.predict(texts)), dtype=np.float64)
            if method.fresh or state_evidence:
                values = await _anchor_values_async(
                    predictor, texts, values, tree, anchors, same_state=state_evidence
                )
            q = repeat_probability(np.array([a.reward for a in anchors], dtype=np.float64), values)
        t1 = time.perf_counter()
        cost = _prices(tree, anchors, accounting, replay_cost, u) if is_priced else None
        if tail is not None:
            tails = tail_anchors(tree, [a.node for a in anchors])
            k = np.asarray(tail(tails, budget, rng_of(task), cost), dtype=np.int64)
        elif objective == "contrast":  # the tree holds the roots only: node 0 mixed = the roots are mixed
            k = contrast_prefixes(
                q,
                budget,
                rng_of(task),
                cost,
                unanimous=not bool(tree.mixed()[0]),
                sibling=np.array([a.node != 0 for a in anchors], dtype=np.bool_),
                weight=sibling_weight,
                max_per_prefix=cap,
            )
        else:
            k = np.asarray(strategy(q, budget, rng_of(task), cost), dtype=np.int64)
        if tick is not None:
            tick("predictor", t1 - t0)
            tick("allocation", time.perf_counter() - t1)
        return PrefixChoice(k, cost, values)

    return allocate


def _prices(
    tree: RolloutTree, anchors: Sequence[Anchor], accounting: str, replay_cost: float, u: int
) -> np.ndarray:
    """Each anchor's replay cost in integer units (U = ``u`` per rollout): the depth-0 anchor a fresh rollout (U),
    a turn prefix ``round(replay_cost * U)`` (paper) or its expected remaining tokens' share (token)."""
    replay = np.array([a.node != 0 for a in anchors])
    cost = np.full(len(anchors), u, np.int64)
    if accounting == "token":  # token work is defined for turn prefixes only
        remaining, full = _token_work(tree, [a for a in anchors if a.node != 0])
        cost[replay] = token_aware_costs(remaining, full, units_per_rollout=u)
    else:
        cost[replay] = round(replay_cost * u)
    return cost


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _anchor_values_async(
    predictor: Any,
    texts: Sequence[str],
    values: np.ndarray,
    tree: RolloutTree,
    anchors: Sequence[Anchor],
    *,
    same_state: bool = False,
) -> np.ndarray:
    """`anchor_values` for a predictor whose ``posterior`` may return an awaitable (a remote actor)."""
    successes, trials = anchor_evidence(tree, anchors, same_state=same_state)
    history = as_history_posterior(predictor)
    if history is not None:
        out = await _maybe(history.posterior(list(texts), successes, trials))
        return np.asarray(out, dtype=np.float64)
    return posterior_mean(values, successes, trials, np.full(len(anchors), PRIOR_TRIALS))


def anchor_evidence(
    tree: RolloutTree, anchors: Sequence[Anchor], *, same_state: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(successes, trials), float64 (A,) each: the rollouts observed below each anchor and their mean reward times
    their count (the prompt: its m roots; a turn prefix: the one rollout through it); with ``same_state``, also
    the other root rollouts in a turn prefix's environment state (identical observations through its depth,
    `trace_rl.predictor.consensus.same_state_outcomes`): samples from the same state the tree already holds."""
    target = tree.value_targets()
    leaves = _leaf_counts(tree)
    trials = np.array([leaves[a.node] for a in anchors], dtype=np.float64)
    successes = np.array([target[a.node] for a in anchors], dtype=np.float64) * trials
    if same_state:
        s, n = same_state_outcomes(tree, [a.node for a in anchors])
        successes, trials = successes + s, trials + n
    return successes, trials


def anchor_values(
    predictor: Any,
    texts: Sequence[str],
    values: np.ndarray,
    tree: RolloutTree,
    anchors: Sequence[Anchor],
    *,
    same_state: bool = False,
) -> np.ndarray:
    """Success estimates of a prompt's anchors given what its root rollouts already showed (``trace_fresh``, and
    any prefix stage with ``budget.state_evidence``).

    Each anchor's estimate is ONE Beta posterior over everything known about it (`trace_rl.predictor.posterior_mean`):
    the prompt (depth 0) has seen its m root rollouts, a turn prefix the one rollout through it. Without this, a
    predictor that cannot tell a decided prefix from an undecided one (V about the prompt's rate) would promise
    flips that the rollout's own outcome already rules out.

    A predictor with a history posterior of its own (the ``posterior`` capability,
    `trace_rl.predictor.capabilities.HistoryPosterior`: the convex predictors) adds these outcomes to the ones it
    keeps in that same posterior; ``values`` (its ``predict``, which already contains the kept history) is then not
    updated a second time. Any other predictor's ``values`` are the prior, updated once with a strength of
    `PRIOR_TRIALS` (4) pseudo-trials.

    With ``same_state`` the evidence of a turn prefix also holds the other root rollouts in its environment state
    (`anchor_evidence`; docs/predictor.md, "The group-aware predictors ... and state evidence").

    Args:
        texts, values: the anchors' serialized texts and the predictor's estimates, (A,).
        tree: the prompt's rollouts; anchors: (A,) nodes of ``tree``.

    Returns:
        float64 (A,) in [0, 1].
    """
    successes, trials = anchor_evidence(tree, anchors, same_state=same_state)
    history = as_history_posterior(predictor)
    if history is not None:
        return np.asarray(history.posterior(list(texts), successes, trials), dtype=np.float64)
    return posterior_mean(values, successes, trials, np.full(len(anchors), PRIOR_TRIALS))


def _leaf_counts(tree: RolloutTree) -> np.ndarray:
    return leaf_counts(np.asarray(tree.parent, np.int64), np.asarray(tree.depth, np.int64))


def _history(tree: RolloutTree, node: int) -> list[Any]:
    """The turns from the prompt down to ``node`` (the anchor's interaction history)."""
    return [tree.turns[int(y)] for y in tree.path_to(node)[1:]]


def _model_tokens(tree: RolloutTree, node: int) -> float:
    turn = tree.turns[node]
    return float(turn.loss_mask.sum()) if turn is not None else 0.0


def _token_work(tree: RolloutTree, anchors: Sequence[Anchor]) -> tuple[np.ndarray, float]:
    """Model tokens each anchor's rollout generated after it, and the mean model tokens of a root rollout."""
    remaining = []
    chain_leaf = tree.chain_leaf()
    for a in anchors:
        leaf = int(chain_leaf[a.node])
        path = [int(y) for y in tree.path_to(leaf)]
        after = path[path.index(int(a.node)) + 1 :]
        remaining.append(sum(_model_tokens(tree, y) for y in after))
    totals = [
        sum(_model_tokens(tree, int(y)) for y in p[1:]) for p in tree.paths() if not tree.is_replay[p[-1]]
    ]
    return np.asarray(remaining, dtype=np.float64), max(float(np.mean(totals)) if totals else 1.0, 1.0)
