"""trace_fresh: anchor estimates updated with what the roots showed, and the prompt's fresh-rollout anchor."""

from __future__ import annotations

import numpy as np
import pytest

from trace_rl.allocation import allocate_prefixes, get_method, repeat_probability
from trace_rl.train.step import anchor_values, effective_method
from trace_rl.tree import RolloutTree
from trace_rl.types import Anchor

NAN = float("nan")


def three_roots() -> RolloutTree:
    # prompt 0 -> three 2-turn roots: (1 -> 2), (3 -> 4), (5 -> 6); rewards 1, 1, 0
    parent = [-1, 0, 1, 0, 3, 0, 5]
    reward = [NAN, NAN, 1.0, NAN, 1.0, NAN, 0.0]
    return RolloutTree.from_parents(parent, reward)


class Fitted:
    def prior_strength(self, texts):  # type: ignore[no-untyped-def]
        return np.full(len(texts), 2.0)


def test_anchor_values_are_beta_posteriors_over_the_rollouts_below_each_anchor() -> None:
    tree = three_roots()
    anchors = [Anchor(0, 0, 1.0), Anchor(1, 1, 1.0), Anchor(5, 1, 0.0)]
    v = np.array([0.5, 0.5, 0.5])
    out = anchor_values(Fitted(), ["p", "a", "b"], v, tree, anchors)
    # prompt: 2 of 3 roots succeeded; each prefix saw its own rollout only
    np.testing.assert_allclose(out, [(2 * 0.5 + 2) / (2 + 3), (2 * 0.5 + 1) / 3, (2 * 0.5 + 0) / 3])
    # a predictor without a fitted strength gets 4 pseudo-trials
    np.testing.assert_allclose(anchor_values(object(), ["p"], v[:1], tree, anchors[:1]), [(4 * 0.5 + 2) / 7])


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

    from trace_rl.train.step import replay_flips

    roots = [SimpleNamespace(reward=r) for r in (1.0, 1.0, 0.0)]
    replays = [
        (1, SimpleNamespace(reward=0.0, start_depth=1)),
        (5, SimpleNamespace(reward=0.0, start_depth=1)),
    ]
    result = SimpleNamespace(tree=three_roots(), roots=roots, replays=replays)
    out = replay_flips([result])  # type: ignore[list-item]
    # the replay under root 1 (reward 1) flips, the one under root 3 (reward 0) does not; a fresh rollout in
    # their place: 1 of root 1's 2 sibling roots differs, both of root 3's do
    assert out["replay_flip_rate"] == out["replay_flip_rate_depth_1"] == 0.5
    assert out["fresh_flip_rate"] == out["fresh_flip_rate_depth_1"] == pytest.approx(0.75)
    empty = replay_flips([SimpleNamespace(tree=three_roots(), roots=roots, replays=[])])  # type: ignore[list-item]
    assert np.isnan(empty["replay_flip_rate"]) and np.isnan(empty["fresh_flip_rate"])
