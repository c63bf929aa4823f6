"""trace_fresh: anchor estimates updated with what the roots showed, and the prompt's fresh-rollout anchor."""

from __future__ import annotations

import numpy as np
import pytest

from trace_rl.allocation import allocate_prefixes, get_method, repeat_probability
from trace_rl.predictor.capabilities import NO_CAPABILITIES, Capability
from trace_rl.train.step import anchor_values, effective_method
from trace_rl.tree import RolloutTree
from trace_rl.types import Anchor

NAN = float("nan")


def three_roots() -> RolloutTree:
    # prompt 0 -> three 2-turn roots: (1 -> 2), (3 -> 4), (5 -> 6); rewards 1, 1, 0
    parent = [-1, 0, 1, 0, 3, 0, 5]
    reward = [NAN, NAN, 1.0, NAN, 1.0, NAN, 0.0]
    return RolloutTree.from_parents(parent, reward)


class Plain:
    """A predictor without a history posterior of its own (no capability)."""

    capabilities = NO_CAPABILITIES


class Fitted:
    """A history posterior whose prior is ``values`` with strength 2 (what `anchor_values` hands it)."""

    capabilities = frozenset({Capability.POSTERIOR})

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def prior_strength(self, texts):  # type: ignore[no-untyped-def]
        return np.full(len(texts), 2.0)

    def posterior(self, texts, successes, trials):  # type: ignore[no-untyped-def]
        return (2.0 * self.values[: len(texts)] + successes) / (2.0 + trials)


def test_anchor_values_are_beta_posteriors_over_the_rollouts_below_each_anchor() -> None:
    tree = three_roots()
    anchors = [Anchor(0, 0, 1.0), Anchor(1, 1, 1.0), Anchor(5, 1, 0.0)]
    v = np.array([0.5, 0.5, 0.5])
    # a predictor without a posterior of its own: the prior v with 4 pseudo-trials; the prompt saw 2 of its 3
    # roots succeed, each prefix its own rollout only
    out = anchor_values(Plain(), ["p", "a", "b"], v, tree, anchors)
    np.testing.assert_allclose(out, [(4 * 0.5 + 2) / (4 + 3), (4 * 0.5 + 1) / 5, (4 * 0.5 + 0) / 5])
    # one that declares the posterior capability gets exactly that evidence in its own posterior
    out = anchor_values(Fitted(v), ["p", "a", "b"], v, tree, anchors)
    np.testing.assert_allclose(out, [(2 * 0.5 + 2) / (2 + 3), (2 * 0.5 + 1) / 3, (2 * 0.5 + 0) / 3])


def test_anchor_values_update_a_history_posterior_once() -> None:
    """With the convex predictor the roots' outcomes join the kept history in ONE Beta posterior: the prompt's
    estimate is (kappa p + s_kept + s_roots) / (kappa + n_kept + n_roots), not a second update of predict()."""
    pytest.importorskip("sklearn")
    from trace_rl.predictor import build_predictor, posterior_mean

    pred = build_predictor("ngram", kappa=2.0)
    texts = [f"Calculate {i} + {i % 7} =" for i in range(60)]
    pred.update(texts, [float(i % 3 == 0) for i in range(60)], np.full(60, 4.0))
    tree = three_roots()
    anchors = [Anchor(0, 0, 1.0)]
    prompt = texts[1:2]  # 0 of 4 kept
    v = pred.predict(prompt)
    out = anchor_values(pred, prompt, v, tree, anchors)
    p = pred.prior_estimate(prompt)
    s_kept, n_kept = pred.history(prompt)
    assert n_kept[0] == 4.0
    np.testing.assert_allclose(out, (2.0 * p + s_kept + 2.0) / (2.0 + n_kept + 3.0))
    twice = posterior_mean(v, [2.0], [3.0], 2.0)  # the old double update: predict() used as a prior again
    assert abs(float(out[0]) - float(twice[0])) > 0.01


def test_fresh_rollouts_win_the_knapsack_over_decided_prefixes() -> None:
    """An all-failed prompt (v = 0.3) against prefixes whose rollouts failed and whose estimate is low: the
    budget goes to fresh rollouts (cost 8 units) rather than to replays (cost 4) that would repeat the failure."""
    rewards = np.array([0.0, 0.0, 0.0])
    values = np.array([0.3, 0.02, 0.02])  # the prompt, two prefixes
    q = repeat_probability(rewards, values)
    k = allocate_prefixes(q, 16, cost=np.array([8, 4, 4]))
    assert k.tolist() == [2, 0, 0]
    assert get_method("trace_fresh").fresh and not get_method("trace").fresh
    assert effective_method(get_method("trace_fresh"), predictor_warm=False).name == "treepo"
    with pytest.raises(ValueError):
        get_method("trace-fresh")


def test_replay_flips_next_to_fresh_flips_of_the_same_prompts() -> None:
    from types import SimpleNamespace

    from trace_rl.train.step_record import replay_flips

    roots = [SimpleNamespace(reward=r) for r in (1.0, 1.0, 0.0)]
    replays = [
        (1, SimpleNamespace(reward=0.0, start_depth=1, sampled_tokens=7)),
        (5, SimpleNamespace(reward=0.0, start_depth=1, sampled_tokens=5)),
    ]
    result = SimpleNamespace(tree=three_roots(), roots=roots, replays=replays)
    out = replay_flips([result])  # type: ignore[list-item]
    # the replay under root 1 (reward 1) flips, the one under root 3 (reward 0) does not; a fresh rollout in
    # their place: 1 of root 1's 2 sibling roots differs, both of root 3's do
    assert out["replay_flip_rate"] == out["replay_flip_rate_depth_1"] == 0.5
    assert out["fresh_flip_rate"] == out["fresh_flip_rate_depth_1"] == pytest.approx(0.75)
    # counts, summable over steps: one flip, 7 + 5 sampled tokens
    assert out["replay_flips_depth_1"] == 1 and out["replay_tokens_depth_1"] == 12
    assert "replay_flips_depth_2" not in out
    empty = replay_flips([SimpleNamespace(tree=three_roots(), roots=roots, replays=[])])  # type: ignore[list-item]
    assert np.isnan(empty["replay_flip_rate"]) and np.isnan(empty["fresh_flip_rate"])


def _scripted_plan(root_rewards: dict[str, list[float]], k0: int):  # type: ignore[no-untyped-def]
    """run_plan over prompts whose i-th root rollout (in reset order) ends with root_rewards[prompt][i]; the
    strategy puts ``k0`` fresh rollouts on the depth-0 anchor whenever it is offered. Returns (results, offers)."""
    import asyncio

    from tests.scripted import FixedCodec, OneTokenBackend
    from trace_rl.rollout.backends import SamplingParams
    from trace_rl.rollout.scheduler import run_plan
    from trace_rl.types import RootPlan, Task

    started: dict[str, int] = {}

    class Env:  # two turns; the reward is scripted per prompt and per episode (fresh rollouts fail)
        def reset(self, task):  # type: ignore[no-untyped-def]
            i = started.get(task.id, 0)
            started[task.id] = i + 1
            rewards = root_rewards[task.id]
            self.reward, self.turn = (rewards[i] if i < len(rewards) else 0.0), 0
            return task.prompt

        def step(self, text):  # type: ignore[no-untyped-def]
            from trace_rl.rollout.toy_env import StepResult

            self.turn += 1
            return StepResult("obs", self.reward if self.turn >= 2 else 0.0, self.turn >= 2, {})

        def snapshot(self):  # type: ignore[no-untyped-def]
            return (self.turn, self.reward)

        def restore(self, state):  # type: ignore[no-untyped-def]
            self.turn, self.reward = state

    offers: dict[str, bool] = {}

    def strategy(task, tree, anchors, points, budget):  # type: ignore[no-untyped-def]
        from trace_rl.rollout.expansion import PrefixChoice

        k = np.zeros(len(anchors), np.int64)
        cost = np.ones(len(anchors), np.int64)
        offers[task.id] = bool(anchors) and anchors[0].node == 0
        if offers[task.id]:
            k[0], cost[0] = k0, 2  # the budget counts replays at 0.5: a fresh rollout costs two
        return PrefixChoice(k, cost)

    tasks = [Task(id=name, env="x", prompt=name) for name in root_rewards]
    counts = [len(r) for r in root_rewards.values()]
    plan = RootPlan(np.asarray(counts, np.int64), np.full(len(counts), 8.0), "test")
    results = asyncio.run(
        run_plan(
            plan,
            tasks,
            OneTokenBackend(),
            Env,
            FixedCodec(),
            SamplingParams(),
            strategy,
            max_turns=2,
            fresh_anchor=True,
        )
    )
    return results, offers


def test_fresh_rollouts_never_go_to_a_prompt_whose_roots_are_mixed() -> None:
    """A prompt with 2 of 4 roots solved is already mixed: a fresh rollout adds no tree-level contrast, so the
    depth-0 anchor is not offered and ``fresh_rollouts_on_mixed`` stays 0; unanimous prompts keep it."""
    from trace_rl.train.step_record import fresh_rollouts_on_mixed

    roots = {"mixed": [1.0, 0.0, 1.0, 0.0], "all_failed": [0.0] * 4, "all_solved": [1.0] * 4}
    results, offers = _scripted_plan(roots, k0=2)
    assert offers == {"mixed": False, "all_failed": True, "all_solved": True}
    fresh = {r.task.id: r.fresh for r in results}
    assert fresh == {"mixed": 0, "all_failed": 2, "all_solved": 2}
    assert fresh_rollouts_on_mixed(results) == 0


def test_fresh_rollouts_on_mixed_counts_what_a_scheduler_bought_for_mixed_prompts() -> None:
    """The step-record field reads the results, not the scheduler's rule: fresh roots bought after mixed planned
    roots count, fresh roots that made a unanimous prompt mixed do not."""
    from types import SimpleNamespace

    from trace_rl.train.step_record import fresh_rollouts_on_mixed

    def result(rewards: list[float], fresh: int) -> SimpleNamespace:
        return SimpleNamespace(roots=[SimpleNamespace(reward=r) for r in rewards], fresh=fresh)

    on_mixed = result([1.0, 0.0, 1.0, 1.0], fresh=2)  # planned roots 1, 0: mixed before the fresh ones
    on_unanimous = result([0.0, 0.0, 1.0], fresh=1)  # the fresh rollout made it mixed
    no_fresh = result([1.0, 0.0], fresh=0)
    assert fresh_rollouts_on_mixed([on_mixed, on_unanimous, no_fresh]) == 2  # type: ignore[list-item]
