"""The convex predictor (fixed features + logistic head refit on everything seen + Beta posterior)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from trace_rl.predictor import NodeExample, OnlineConfig, OnlineTrainer, build_predictor, posterior_mean
from trace_rl.predictor.convex import ConvexSuccessPredictor, fit_prior_strength
from trace_rl.predictor.metrics import spearman


def arithmetic_prompts(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Prompts whose success falls with the number of digits to copy (the demo task's difficulty law)."""
    rng = np.random.default_rng(seed)
    texts, probs = [], []
    for _ in range(n):
        terms = rng.integers(2, 7)
        nums = [str(rng.integers(1, 10 ** rng.integers(1, 4))) for _ in range(terms)]
        ops = rng.choice(["+", "-", "*"], size=terms - 1)
        expr = nums[0] + "".join(f" {o} {x}" for o, x in zip(ops, nums[1:], strict=True))
        digits = sum(len(x) for x in nums)
        texts.append(f"Calculate {expr} =")
        probs.append(1 / (1 + np.exp(-(3.0 - 0.45 * digits))))
    return texts, np.asarray(probs)


def test_before_any_update_every_estimate_is_the_prior():
    pred = build_predictor("ngram")
    assert isinstance(pred, ConvexSuccessPredictor) and not pred.is_warm
    np.testing.assert_array_equal(pred.predict(["a", "b c"]), [0.5, 0.5])
    with pytest.raises(ValueError, match="single string"):
        pred.predict("abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="targets"):
        pred.update(["a"], [1.5])


def test_learns_difficulty_from_a_few_hundred_prompts_through_update_minibatches():
    texts, p = arithmetic_prompts(400, seed=0)
    rng = np.random.default_rng(1)
    outcomes = rng.random((400, 16)) < p[:, None]
    train, test = np.arange(320), np.arange(320, 400)
    pred = build_predictor("ngram")
    for lo in range(0, 320, 32):  # minibatches of 32, targets = 16-sample success rates, weight = trials
        idx = train[lo : lo + 32]
        pred.update([texts[i] for i in idx], outcomes[idx].mean(1), np.full(idx.size, 16.0))
    est = pred.predict([texts[i] for i in test])
    assert spearman(est, p[test]) >= 0.75
    # calibrated: the mean estimate matches the mean outcome, and the error is far below a constant's
    assert abs(est.mean() - outcomes[test].mean()) < 0.05
    assert np.mean((est - p[test]) ** 2) < 0.5 * np.var(p[test])


def test_a_text_seen_before_moves_toward_its_own_history():
    texts, p = arithmetic_prompts(200, seed=2)
    rng = np.random.default_rng(3)
    pred = build_predictor("ngram", kappa=4.0)
    pred.update(texts, (rng.random(200) < p).astype(float))
    fresh = "Calculate 5 + 7 ="
    before = float(pred.text_estimate([fresh])[0])
    assert float(pred.predict([fresh])[0]) == pytest.approx(before)  # unseen: the text estimate only
    pred.update([fresh], [0.0], [8.0])  # 0 of 8
    s, n = pred.history([fresh])
    assert (s[0], n[0]) == (0.0, 8.0)
    text_p = float(pred.text_estimate([fresh])[0])
    assert float(pred.predict([fresh])[0]) == pytest.approx((4.0 * text_p + 0.0) / (4.0 + 8.0))


def test_state_dict_round_trip_gives_the_same_predictions():
    texts, p = arithmetic_prompts(120, seed=4)
    pred = build_predictor("ngram")
    pred.update(texts, p)
    clone = build_predictor("ngram")
    clone.load_state_dict(pred.state_dict())
    np.testing.assert_allclose(clone.predict(texts[:20]), pred.predict(texts[:20]), atol=1e-6)
    assert clone.num_updates == pred.num_updates and clone.is_warm
    with pytest.raises(ValueError, match="lacks"):
        clone.load_state_dict({"format": 1})


def test_posterior_mean_and_prior_strength_hand_numbers():
    np.testing.assert_allclose(
        posterior_mean([0.5, 0.2, 0.3], [3, 0, 1], [4, 0, 1], 2.0), [4 / 6, 0.2, 1.6 / 3]
    )
    np.testing.assert_allclose(posterior_mean([0.4], [1], [2], np.inf), [0.4])
    # beta-binomial data with a known strength: the fitted kappa lands near it
    rng = np.random.default_rng(5)
    prior = rng.uniform(0.2, 0.8, 3000)
    kappa = 6.0
    theta = rng.beta(kappa * prior, kappa * (1 - prior))
    s = rng.binomial(8, theta)
    fitted = fit_prior_strength(prior, s, np.full(3000, 8.0))
    assert 4.0 <= fitted <= 9.0
    assert fit_prior_strength(prior[:5], s[:5], np.ones(5)) == pytest.approx(1000.0)  # n = 1: not identified


def test_online_trainer_refits_once_per_step_without_double_counting():
    texts, p = arithmetic_prompts(40, seed=6)
    pred = build_predictor("ngram")
    online = OnlineTrainer(pred, OnlineConfig(batch_size=8, updates_per_step=5))
    step1 = [NodeExample(t, float(v), 0, 8.0) for t, v in zip(texts[:20], p[:20], strict=True)]
    out = online.observe_step(step1)
    assert out["predictor/updates"] == 1.0  # one refit, whatever updates_per_step says
    online.observe_step([NodeExample(t, float(v), 0, 8.0) for t, v in zip(texts[20:], p[20:], strict=True)])
    _, n = pred.history(texts)
    np.testing.assert_allclose(n, 8.0)  # every text counted once, never re-fed from the buffer


def test_updates_per_step_is_a_count_for_gradient_predictors():
    class Counting:
        name, prior, max_chars, is_warm = "count", 0.5, 100, False

        def __init__(self) -> None:
            self.calls = 0

        def predict(self, texts):  # type: ignore[no-untyped-def]
            return np.full(len(texts), 0.5)

        def update(self, texts, targets, weights=None):  # type: ignore[no-untyped-def]
            self.calls += 1
            return {"loss": 0.0}

    pred = Counting()
    online = OnlineTrainer(pred, OnlineConfig(batch_size=30, updates_per_step=8))  # type: ignore[arg-type]
    online.observe_step([NodeExample(f"p{i}", 0.5, 0) for i in range(8)])
    assert pred.calls == 8  # 8 prompts / 30 slots would give 1 under the passes rule


def test_binomial_fit_matches_scikit_learn_on_duplicated_rows():
    """fit_binomial_logistic on counts = sklearn's LogisticRegression on rows split into successes/failures."""
    from sklearn.linear_model import LogisticRegression

    from trace_rl.predictor.convex import fit_binomial_logistic

    rng = np.random.default_rng(7)
    x = rng.normal(size=(60, 5))
    trials = rng.integers(1, 9, size=60).astype(float)
    p = 1 / (1 + np.exp(-(x @ np.array([1.0, -2.0, 0.5, 0.0, 0.3]) + 0.2)))
    succ = rng.binomial(trials.astype(int), p).astype(float)
    beta, b0 = fit_binomial_logistic(x, succ, trials, 3.0, max_iter=500)
    ref = LogisticRegression(C=3.0, max_iter=2000, tol=1e-10).fit(
        np.vstack([x, x]), np.r_[np.ones(60), np.zeros(60)], sample_weight=np.r_[succ, trials - succ]
    )
    np.testing.assert_allclose(beta, ref.coef_[0], atol=2e-3)
    assert b0 == pytest.approx(float(ref.intercept_[0]), abs=2e-3)
