"""The contrast objective of the prefix stage (issue 23 item 2): hand values, the exact solver's behaviour on the
cases that distinguish it from the paper's rule, and the config key reaching the scheduler (scripted step)."""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
import pytest

from trace_rl.allocation import (
    BudgetShape,
    allocate_contrast,
    allocate_prefixes,
    contrast_value,
    get_method,
)
from trace_rl.predictor.capabilities import NO_CAPABILITIES
from trace_rl.train.config import ConfigError, load_config


def test_contrast_value_hand_values() -> None:
    q, k = np.array([0.5, 0.8]), np.array([2, 1])
    # unanimous: tree 1 - 0.25 * 0.8 = 0.8; siblings (1 - 0.25) + (1 - 0.8) = 0.95
    assert contrast_value(q, k, unanimous=True, weight=1.0) == pytest.approx(0.8 + 0.95)
    assert contrast_value(q, k, unanimous=True, weight=0.0) == pytest.approx(0.8)
    # a mixed tree has its tree-level contrast already: sibling terms only
    assert contrast_value(q, k, unanimous=False, weight=2.0) == pytest.approx(2 * 0.95)
    # the depth-0 anchor (a fresh rollout) has no sibling group of its own: tree term only
    sib = np.array([False, True])
    assert contrast_value(q, k, unanimous=True, sibling=sib) == pytest.approx(0.8 + 0.2)
    assert contrast_value(q, k, unanimous=False, sibling=sib) == pytest.approx(0.2)


def test_unanimous_tree_with_sibling_weight_zero_concentrates_on_the_likeliest_flip() -> None:
    """One flip anywhere makes a unanimous tree mixed: with weight 0 every replay goes to the anchor most likely
    to flip (smallest q), where the paper's rule spreads them over the anchors."""
    q = np.array([0.9, 0.7, 0.75, 0.8, 0.95])
    k = allocate_contrast(q, 8, unanimous=True, weight=0.0)
    assert k.tolist() == [0, 8, 0, 0, 0]
    paper = allocate_prefixes(q, 8)
    assert (paper > 0).sum() >= 3
    # with token costs, the anchor with the most flips per cost unit: -log q / cost
    k = allocate_contrast(q, 12, unanimous=True, weight=0.0, cost=np.array([1, 4, 4, 4, 4]))
    assert k.tolist() == [12, 0, 0, 0, 0]  # 12 * -log 0.9 = 1.26 > 3 * -log 0.7 = 1.07
    # the default weight (1) sits between: fewer anchors than the paper's rule
    k1 = allocate_contrast(q, 8, unanimous=True)
    assert 1 < (k1 > 0).sum() <= (paper > 0).sum() and k1.sum() == 8


def test_mixed_tree_gets_only_sibling_value() -> None:
    """A mixed tree: the objective is the weight times the paper's over the turn prefixes, so the allocation is the
    paper's there, and the depth-0 anchor (a fresh rollout, no sibling group) gets nothing."""
    q = np.array([0.3, 0.9, 0.7, 0.8])
    sib = np.array([False, True, True, True])
    for weight in (0.0, 0.5, 1.0):
        k = allocate_contrast(q, 6, unanimous=False, sibling=sib, weight=weight)
        assert k[0] == 0
        assert k[1:].tolist() == allocate_prefixes(q[1:], 6).tolist()
    # unanimous, the same fresh anchor (most likely to flip) is worth the most
    assert allocate_contrast(q, 6, unanimous=True, sibling=sib, weight=0.0).tolist() == [6, 0, 0, 0]
    cost = np.array([8, 4, 4, 4])
    k = allocate_contrast(q, 32, unanimous=False, sibling=sib, cost=cost)
    assert k[0] == 0 and int((cost * k).sum()) == 32


def test_contrast_solver_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="sibling"):
        allocate_contrast([0.5, 0.5], 2, unanimous=True, sibling=np.array([True]))
    with pytest.raises(ValueError, match="weight"):
        allocate_contrast([0.5], 2, unanimous=True, weight=-1.0)
    with pytest.raises(ValueError, match="weight"):
        allocate_contrast([0.5], 2, unanimous=True, weight=float("nan"))
    with pytest.raises(ValueError):
        allocate_contrast([1.5], 2, unanimous=True)
    assert allocate_contrast([], 4, unanimous=True).tolist() == []
    assert allocate_contrast([0.5, 0.5], 0, unanimous=True).tolist() == [0, 0]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["budget.prefix_objective=tree"], "budget.prefix_objective: must be paper or contrast"),
        (["method=treepo", "budget.prefix_objective=contrast"], "budget.prefix_objective: contrast"),
        (["method=branpo", "budget.prefix_objective=contrast"], "budget.prefix_objective: contrast"),
        (
            ["budget.prefix_objective=contrast", "budget.sibling_weight=-0.5"],
            "budget.sibling_weight: must be",
        ),
        (["budget.sibling_weight=0.5"], "budget.sibling_weight: applies to budget.prefix_objective=contrast"),
    ],
)
def test_invalid_prefix_objective_settings_are_one_line_config_errors(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=overrides)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------- scripted training step
class TwoTurnEnv:
    """Two turns; every episode fails; turn 1's observation names the root episode (obs0, obs1, ...), so each
    root's anchor has its own predictor text. Episodes run one at a time (max_concurrency 1)."""

    started: ClassVar[int] = 0

    def reset(self, task):  # type: ignore[no-untyped-def]
        self.index, self.turn = TwoTurnEnv.started, 0
        TwoTurnEnv.started += 1
        return task.prompt

    def step(self, text):  # type: ignore[no-untyped-def]
        from trace_rl.rollout.toy_env import StepResult

        self.turn += 1
        return StepResult(f"obs{self.index}", 0.0, self.turn >= 2, {})

    def snapshot(self):  # type: ignore[no-untyped-def]
        return (self.turn, self.index)

    def restore(self, state):  # type: ignore[no-untyped-def]
        self.turn, self.index = state


class ByObservation:
    """A warm predictor: anchor after obs<i> succeeds with probability V[i]; prompts 0.5."""

    is_warm = True
    max_chars = 2048
    capabilities = NO_CAPABILITIES
    V: ClassVar[list[float]] = [0.30, 0.25, 0.20, 0.15]

    def predict(self, texts):  # type: ignore[no-untyped-def]
        out = []
        for t in texts:
            m = re.search(r"obs(\d+)", t)
            out.append(self.V[int(m.group(1))] if m else 0.5)
        return np.asarray(out)


class Online:
    def observe_step(self, examples):  # type: ignore[no-untyped-def]
        return {}


def _step_with(overrides: list[str]):  # type: ignore[no-untyped-def]
    """One trace_prefix_only step (1 prompt x 4 failed roots, budget 2 x 4 = 8 replays) under a config."""
    from tests.scripted import FixedCodec, OneTokenBackend
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.train.step import StepParts, training_step
    from trace_rl.types import Task

    cfg = load_config(
        overrides=["method=trace_prefix_only", "env.max_turns=2", "sampling.max_concurrency=1", *overrides]
    )
    TwoTurnEnv.started = 0
    parts = StepParts(
        backend=OneTokenBackend(),
        env_factory=TwoTurnEnv,
        codec=FixedCodec(),
        sampling=SamplingParams(),
        predictor=ByObservation(),
        online=Online(),
        update_policy=lambda trees: {"paths": 0.0, "rows": 0.0},
        spec=cfg.spec,
    )
    shape = BudgetShape(roots=4, continuations=2, group_size=4)
    pool = [Task(id=f"p{i}", env="x", prompt=f"p{i}") for i in range(2)]
    record, results = training_step(1, pool, get_method(cfg.method), shape, parts, np.random.default_rng(0))
    (result,) = results
    return record, [int(x) for x in result.k]


def test_the_config_key_reaches_the_scheduler() -> None:
    """Same scripted step and predictor; the two objectives place the 8 replays differently: the paper's rule
    spreads them by sum 1 - q^k over the four anchors (q = 0.7, 0.75, 0.8, 0.85), the contrast objective with
    sibling weight 0 puts all on the anchor likeliest to flip (its tree is unanimous: every root failed)."""
    record, paper = _step_with([])
    assert paper == [3, 2, 2, 1] and record["prefix_objective"] == "paper"
    record, contrast = _step_with(["budget.prefix_objective=contrast", "budget.sibling_weight=0"])
    assert contrast == [8, 0, 0, 0] and record["prefix_objective"] == "contrast"
    assert record["replays"] == 8
    # the default weight 1 balances the tree term against the four sibling groups
    _, balanced = _step_with(["budget.prefix_objective=contrast"])
    assert sum(balanced) == 8 and balanced not in (paper, contrast)


def test_trace_fresh_never_buys_a_fresh_rollout_for_mixed_roots_under_contrast() -> None:
    """The depth-0 anchor of a prompt whose roots are mixed (2 of 3 solved) is worth nothing under the contrast
    objective, even offered and even though its flip probability is by far the largest (about 0.43 against 0.001
    for the decided prefixes): the paper's objective spends the budget on it, the contrast objective gives it 0.
    With unanimous roots it is valued by the tree term and gets the budget."""
    import asyncio

    from trace_rl.train.prefixes import prefix_budget, replay_allocator
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Anchor, Task, Turn

    class Decided:  # prefixes of a "win" rollout succeed, of a "lose" one fail; the prompt is a coin flip
        max_chars, capabilities = 2048, NO_CAPABILITIES

        def predict(self, texts):  # type: ignore[no-untyped-def]
            return np.array([0.999 if "win" in t else 0.001 if "lose" in t else 0.5 for t in texts])

    def allocate(objective: str, rewards: list[float]) -> list[int]:
        tree = RolloutTree.new()
        turns = {1.0: [Turn(text="win"), Turn(text="end")], 0.0: [Turn(text="lose"), Turn(text="end")]}
        nodes = [int(tree.add_rollout(turns[r], r)[0]) for r in rewards]
        anchors = [Anchor(0, 0, 1.0)] + [Anchor(n, 1, r) for n, r in zip(nodes, rewards, strict=True)]
        method = get_method("trace_fresh")
        budget, _ = prefix_budget(6, 0.5, method=method, accounting="paper")  # 6 replays = 24 units
        alloc = replay_allocator(
            method, Decided(), replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0), objective=objective
        )
        choice = asyncio.run(alloc(Task(id="p", env="x", prompt="p"), tree, anchors, [None] * 4, budget))
        return [int(x) for x in choice.k]

    assert allocate("paper", [1.0, 1.0, 0.0]) == [3, 0, 0, 0]  # 3 fresh rollouts x 8 units
    assert allocate("contrast", [1.0, 1.0, 0.0]) == [0, 2, 2, 2]  # 6 replays x 4 units, none fresh
    assert allocate("contrast", [0.0, 0.0, 0.0]) == [3, 0, 0, 0]
