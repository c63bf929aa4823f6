"""Lab predictors: oracle, calibrated noisy oracle, text adapter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trace_rl.lab import (
    NoisyOraclePredictor,
    OraclePredictor,
    Query,
    TabularTextPredictor,
    TextPredictorAdapter,
    make_pool,
    prefix_query,
    prompt_queries,
    rollout_trees,
    serialize_query,
    true_probability,
)
from trace_rl.types import Task


def _tree():
    pool = make_pool([0.3, 0.8], 5.0, 6)
    trees = rollout_trees(pool, [0], [2], np.random.default_rng(0))
    return pool, trees[0]


def test_oracle_reads_the_latent_state() -> None:
    pool, tree = _tree()
    oracle = OraclePredictor()
    assert oracle.predict(prompt_queries(pool.tasks)).tolist() == [0.3, 0.8]
    node = tree.anchors()[2].node
    q = prefix_query(pool.tasks[0], tree, node)
    assert q.depth == tree.depth[node] == 3
    assert [t.info["turn"] for t in q.turns] == [1, 2, 3]  # path from the first turn to the anchor
    assert oracle.predict([q])[0] == tree.turn(node).info["v"]


def test_true_probability_rejects_non_lab_queries() -> None:
    with pytest.raises(ValueError, match="lab state"):
        true_probability(Query(task=Task(id="x", env="math", prompt="2+2?")))


def test_noisy_oracle_by_hand() -> None:
    # n = 2, prior Beta(0.4, 0.4): V = 1 gives K = 2, p = 2.4 / 2.8 = 0.857142...; V = 0 gives 0.4 / 2.8.
    p = NoisyOraclePredictor(2, seed=0).from_truth([1.0, 0.0])
    assert p.tolist() == pytest.approx([2.4 / 2.8, 0.4 / 2.8])
    # n = 0: the prior mean 0.4 / 0.8 = 0.5 whatever the truth.
    assert NoisyOraclePredictor(0).from_truth([0.1, 0.9]).tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="information"):
        NoisyOraclePredictor(-1)


def test_noisy_oracle_is_calibrated_with_the_documented_error() -> None:
    # V ~ Beta(0.4, 0.4): E[V (1 - V)] = ab / ((a + b)(a + b + 1)) = 0.16 / 1.44 = 0.1111;
    # MSE = E[V (1 - V)] / (a + b + n) = 0.1111 / 2.8 = 0.03968 for n = 2.
    rng = np.random.default_rng(1)
    n = 200_000
    v = rng.beta(0.4, 0.4, n)
    p = NoisyOraclePredictor(2, seed=2).from_truth(v)
    assert float(np.mean((p - v) ** 2)) == pytest.approx(0.1111 / 2.8, rel=0.03)
    for level in np.unique(p):  # calibration: E[V | p] = p for each of the three values of p
        sel = p == level
        assert abs(float(v[sel].mean()) - level) < 4.5 * float(v[sel].std()) / math.sqrt(sel.sum())


def test_serialize_query_shows_only_observable_text() -> None:
    pool, tree = _tree()
    node = tree.anchors()[1].node
    text = serialize_query(prefix_query(pool.tasks[0], tree, node))
    lines = text.split("\n")
    assert lines[0] == "prompt: lab task lab-0"
    assert lines[1].startswith("turn 1 -> ") and lines[2].startswith("turn 2 -> ")
    assert str(tree.turn(node).info["v"]) not in text


def test_adapter_learns_value_targets_with_the_tabular_predictor() -> None:
    pool, tree = _tree()
    adapter = TextPredictorAdapter(TabularTextPredictor())
    before = adapter.predict(prompt_queries(pool.tasks[:1]))
    assert before.tolist() == [0.5]  # prior
    metrics = adapter.update_from_trees([tree], [pool.tasks[0]])
    # examples: every non-leaf node (prompt + anchors of the 2 rollouts)
    assert metrics["examples"] == 1 + len(tree.anchors())
    after = adapter.predict(prompt_queries(pool.tasks[:1]))
    assert after[0] == pytest.approx(tree.value_targets()[0])  # mean reward of the 2 rollouts


class _Bad:
    def __init__(self, out: list[float]):
        self.out = out

    def predict(self, texts):
        return np.asarray(self.out)

    def update(self, texts, targets):
        return {}


def test_adapter_rejects_malformed_predictions() -> None:
    pool, _ = _tree()
    with pytest.raises(ValueError, match="NaN"):
        TextPredictorAdapter(_Bad([math.nan])).predict(prompt_queries(pool.tasks[:1]))
    with pytest.raises(ValueError, match="shape"):
        TextPredictorAdapter(_Bad([0.1, 0.2, 0.3])).predict(prompt_queries(pool.tasks[:1]))
    assert TextPredictorAdapter(_Bad([1.7])).predict(prompt_queries(pool.tasks[:1])).tolist() == [1.0]
    with pytest.raises(ValueError, match="predict"):
        TextPredictorAdapter(object())  # type: ignore[arg-type]
