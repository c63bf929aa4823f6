"""dapo (DAPO dynamic sampling): draws until its batch holds batch_size mixed groups or its draw cap, and every
rollout it generated counts as spent (scripted policy, real step and scheduler)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from tests.scripted import FixedCodec, OneTokenBackend
from trace_rl.allocation import BudgetShape, get_method
from trace_rl.predictor.capabilities import NO_CAPABILITIES
from trace_rl.rollout.backends import SamplingParams
from trace_rl.rollout.toy_env import StepResult
from trace_rl.spec import BudgetSpec, SamplingSpec, TraceSpec
from trace_rl.train.step import StepParts, training_step
from trace_rl.types import Task


class OneTurnEnv:
    """Every episode is one turn; its reward comes from the shared script (episodes run one at a time)."""

    script: ClassVar[list[float]] = []

    def reset(self, task):  # type: ignore[no-untyped-def]
        return task.prompt

    def step(self, text):  # type: ignore[no-untyped-def]
        return StepResult("", OneTurnEnv.script.pop(0), True, {})

    def snapshot(self):  # type: ignore[no-untyped-def]
        return None

    def restore(self, state):  # type: ignore[no-untyped-def]
        pass


class Predictor:
    is_warm = False
    max_chars = 2048
    capabilities = NO_CAPABILITIES

    def predict(self, texts):  # type: ignore[no-untyped-def]
        return np.full(len(texts), 0.5)


class Online:
    def observe_step(self, examples):  # type: ignore[no-untyped-def]
        return {}


def run_dapo(rewards: list[float], *, cap: int = 3, budget_left: float | None = None):  # type: ignore[no-untyped-def]
    OneTurnEnv.script = list(rewards)
    trained: list[int] = []

    def update(trees):  # type: ignore[no-untyped-def]
        trained.append(len(trees))
        return {"paths": 4.0 * len(trees), "rows": 4.0 * len(trees), "optimizer_steps": 1.0, "adv_sq": 0.0}

    parts = StepParts(
        backend=OneTokenBackend(),
        env_factory=OneTurnEnv,
        codec=FixedCodec(),
        sampling=SamplingParams(),
        predictor=Predictor(),
        online=Online(),
        update_policy=update,
        spec=TraceSpec(
            method="dapo",
            max_turns=1,
            sampling=SamplingSpec(
                max_concurrency=1
            ),  # one episode at a time: the script's rewards go in order
            budget=BudgetSpec(max_num_gen_batches=cap),
        ),
    )
    shape = BudgetShape(roots=8, continuations=0, group_size=4)  # batch of 2 prompts x 4 rollouts
    pool = [Task(id=f"p{i}", env="x", prompt=f"p{i}") for i in range(8)]
    record, results = training_step(
        1, pool, get_method("dapo"), shape, parts, np.random.default_rng(0), budget_left=budget_left
    )
    return record, results, trained


def test_groups_that_always_agree_draw_to_the_cap_and_spend_everything() -> None:
    record, results, trained = run_dapo([0.0] * 64, cap=3)
    assert record["gen_batches"] == 3
    assert record["budget_spent"] == 3 * 8 == record["rollouts_generated"] == record["root_rollouts"]
    assert record["trained_groups"] == 0 and results == [] and trained == [0]  # zero-gradient steps only
    assert record["effective_ratio"] == 0.0


def test_groups_that_always_mix_draw_once() -> None:
    record, results, trained = run_dapo([1.0, 0.0] * 32, cap=3)
    assert record["gen_batches"] == 1
    assert record["budget_spent"] == 8 and record["rollouts_generated"] == 8
    assert record["trained_groups"] == 2 == len(results) and trained == [2]
    assert record["effective_ratio"] == record["trained_effective_ratio"] == 1.0


def test_a_draw_that_would_overspend_the_runs_budget_is_not_started() -> None:
    record, _, _ = run_dapo([0.0] * 64, cap=4, budget_left=20.0)
    assert record["gen_batches"] == 2 and record["budget_spent"] == 16


def test_mixed_groups_are_kept_up_to_the_batch_and_unmixed_ones_dropped() -> None:
    # first draw: prompt A mixed, prompt B unanimous; second draw: both mixed -> 3 mixed, batch keeps 2
    rewards = [1.0, 0.0, 1.0, 1.0] + [0.0] * 4 + [1.0, 0.0, 0.0, 0.0] * 2
    record, results, _ = run_dapo(rewards, cap=3)
    assert record["gen_batches"] == 2 and record["budget_spent"] == 16
    assert record["trained_groups"] == 2 and all(r.tree.mixed()[0] for r in results)
    assert record["effective_ratio"] == pytest.approx(3 / 4)


def test_dapo_is_registered_without_predictor_or_replays() -> None:
    method = get_method("dapo")
    assert method.dynamic_sampling and not method.uses_predictor and not method.has_replays
