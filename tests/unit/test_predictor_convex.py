"""The convex predictor (fixed features + logistic head refit on everything seen + Beta posterior)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sklearn")

from trace_rl.predictor import NodeExample, OnlineConfig, OnlineTrainer, build_predictor, posterior_mean
from trace_rl.predictor.capabilities import NO_CAPABILITIES
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
    assert float(pred.prior_estimate([fresh])[0]) == pytest.approx(before)
    pred.update([fresh], [0.0], [8.0])  # 0 of 8
    s, n = pred.history([fresh])
    assert (s[0], n[0]) == (0.0, 8.0)
    prior = float(pred.prior_estimate([fresh])[0])  # now the cross-fitted head's, not the full head's
    assert prior != pytest.approx(float(pred.text_estimate([fresh])[0]))
    assert float(pred.predict([fresh])[0]) == pytest.approx((4.0 * prior + 0.0) / (4.0 + 8.0))
    # outcomes a step has just seen join the kept ones in the same posterior (one update, not two)
    assert float(pred.posterior([fresh], [2.0], [2.0])[0]) == pytest.approx(
        (4.0 * prior + 2.0) / (4.0 + 10.0)
    )
    with pytest.raises(ValueError, match="successes"):
        pred.posterior([fresh], [3.0], [2.0])


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
    # a format-1 state (one aggregated store, before versions) loads as one update
    old = {
        "format": 1,
        "name": "ngram",
        "num_updates": 3,
        "store": {t: [float(v), 1.0] for t, v in zip(texts, p, strict=True)},
    }
    legacy = build_predictor("ngram")
    legacy.load_state_dict(old)
    assert legacy.num_updates == 3 and legacy.num_rows == len(texts) and legacy.is_warm


def prompts_and_prefixes(seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Arithmetic prompts with a one-turn prefix each (serialized as the trainer does): texts, successes, trials."""
    from types import SimpleNamespace

    from trace_rl.predictor import serialize_anchor

    prompts, p = arithmetic_prompts(120, seed=seed)
    rng = np.random.default_rng(seed + 1)
    texts, succ, trials = [], [], []
    for prompt, pi in zip(prompts, p, strict=True):
        wins = rng.binomial(4, pi)
        turn = SimpleNamespace(text='<tool_call>{"code": "1"}</tool_call>', observation=str(rng.integers(99)))
        texts += [serialize_anchor(prompt, []), serialize_anchor(prompt, [turn])]
        succ += [float(wins), float(min(wins, 2))]
        trials += [4.0, 2.0]
    return texts, np.asarray(succ), np.asarray(trials)


def implied_prior(pred: ConvexSuccessPredictor, text: str) -> float:
    """The prior p the posterior used: solve predict = (kappa p + s) / (kappa + n) for p."""
    s, n = pred.history([text])
    kappa = float(pred.prior_strength([text])[0])
    return float((pred.predict([text])[0] * (kappa + n[0]) - s[0]) / kappa)


def test_the_prior_of_a_stored_text_is_the_estimate_of_a_head_fitted_without_its_outcomes():
    """No double counting: the prior of a stored prompt is the estimate of the head fitted before the prompt's
    outcomes arrived (held out), so flipping those outcomes moves its posterior through s and n only."""
    import copy

    from trace_rl.predictor.convex import fit_binomial_logistic, linear_scores

    texts, succ, trials = prompts_and_prefixes(seed=11)
    target = texts[120]  # a prompt of the second update (texts[121] is its prefix)
    preds, before = [], None
    for wins in (0.0, 4.0):  # the same data except the target prompt's outcomes (and its prefix's)
        s = succ.copy()
        s[120], s[121] = wins, wins / 2
        pred = build_predictor("ngram", kappa=4.0)
        assert isinstance(pred, ConvexSuccessPredictor)
        pred.update(texts[:120], s[:120] / trials[:120], trials[:120])
        before = copy.deepcopy(pred)  # the head fitted without any outcome of the target
        pred.update(texts[120:], s[120:] / trials[120:], trials[120:])
        preds.append(pred)
    a, b = preds
    assert before is not None
    assert a.history([target])[0][0] == 0.0 and b.history([target])[0][0] == 4.0
    held_out = float(before.text_estimate([target])[0])
    assert implied_prior(a, target) == pytest.approx(held_out, abs=1e-9)
    assert implied_prior(b, target) == pytest.approx(held_out, abs=1e-9)
    assert float(a.prior_estimate([target])[0]) == held_out
    # that head is the fit on the first update's rows alone (no outcome of the target among them)
    beta, b0 = fit_binomial_logistic(
        before._features(texts[:120]), succ[:120], trials[:120], a.config.c, max_iter=2000
    )
    reference = 1.0 / (1.0 + np.exp(-(float(linear_scores(a._features([target]), beta)[0]) + b0)))
    assert held_out == pytest.approx(reference, abs=2e-3)
    # the current head did see the target's outcomes: it is not the prior (the double count this rules out)
    assert abs(float(a.text_estimate([target])[0]) - float(b.text_estimate([target])[0])) > 0.02
    # texts stored by the first update had no head before them: their prior is the cold-start prior
    assert float(a.prior_estimate(texts[:1])[0]) == a.prior
    # an unseen text's prior is the current head's estimate (what its held-out prior would be if stored next)
    assert float(a.prior_estimate(["Calculate 1 + 2 ="])[0]) == float(
        a.text_estimate(["Calculate 1 + 2 ="])[0]
    )


def test_kappa_is_fitted_against_the_cross_fitted_priors():
    from trace_rl.predictor.convex import fit_prior_strength

    texts, succ, trials = prompts_and_prefixes(seed=12)
    pred = build_predictor("ngram", kappa_min_texts=20)
    assert isinstance(pred, ConvexSuccessPredictor)
    pred.update(texts[:120], succ[:120] / trials[:120], trials[:120])
    pred.update(texts[120:], succ[120:] / trials[120:], trials[120:])
    prompts = texts[0::2]
    s, n = pred.history(prompts)
    assert pred.kappa["prompt"] == fit_prior_strength(pred.prior_estimate(prompts), s, n)


def test_outcomes_older_than_the_window_are_forgotten_and_decay_weighs_by_age():
    texts, succ, trials = prompts_and_prefixes(seed=13)
    pred = build_predictor("ngram", history_window=2, history_decay=0.5)
    assert isinstance(pred, ConvexSuccessPredictor)
    batches = [slice(0, 80), slice(80, 160), slice(160, 240)]
    for sl in batches:
        out = pred.update(texts[sl], succ[sl] / trials[sl], trials[sl])
    assert out["rows"] == 160.0 and pred.num_rows == 160  # the first update left the window
    _, n_first = pred.history(texts[:80])
    np.testing.assert_array_equal(n_first, 0.0)
    _, n_mid = pred.history(texts[80:160])
    np.testing.assert_allclose(n_mid, 0.5 * trials[80:160])  # one version old: half weight
    _, n_last = pred.history(texts[160:])
    np.testing.assert_allclose(n_last, trials[160:])
    clone = build_predictor("ngram", history_window=2, history_decay=0.5)
    clone.load_state_dict(pred.state_dict())
    np.testing.assert_allclose(clone.predict(texts[::7]), pred.predict(texts[::7]), atol=1e-6)
    for bad in ({"history_window": 0}, {"history_decay": 0.0}, {"history_decay": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            build_predictor("ngram", **bad)


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
        capabilities = NO_CAPABILITIES

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


def test_binomial_fit_on_column_blocks_with_empty_columns_matches_scikit_learn():
    """A sparse block with never-used columns beside a dense block: the fit restricted to the used columns is the
    full problem's optimum (sklearn on the whole matrix), and the unused columns come back exactly 0."""
    from scipy import sparse
    from sklearn.linear_model import LogisticRegression

    from trace_rl.predictor.convex import fit_binomial_logistic, linear_scores

    rng = np.random.default_rng(3)
    counts = rng.poisson(0.6, size=(80, 12)).astype(float)
    counts[:, [2, 7, 11]] = 0.0  # hashed n-gram columns no kept text uses
    dense = rng.normal(size=(80, 4))
    full = np.hstack([counts, dense])
    trials = rng.integers(1, 9, size=80).astype(float)
    p = 1 / (1 + np.exp(-(full @ rng.normal(size=16) * 0.5)))
    succ = rng.binomial(trials.astype(int), p).astype(float)
    blocks = (sparse.csr_matrix(counts), dense)
    beta, b0 = fit_binomial_logistic(blocks, succ, trials, 3.0, max_iter=500)
    ref = LogisticRegression(C=3.0, max_iter=5000, tol=1e-10).fit(
        np.vstack([full, full]), np.r_[np.ones(80), np.zeros(80)], sample_weight=np.r_[succ, trials - succ]
    )
    assert beta.shape == (16,)
    assert np.all(beta[[2, 7, 11]] == 0.0)
    np.testing.assert_allclose(beta, ref.coef_[0], atol=5e-3)  # L-BFGS-B stops at gtol 1e-4
    assert b0 == pytest.approx(float(ref.intercept_[0]), abs=5e-3)
    np.testing.assert_allclose(linear_scores(blocks, beta), full @ beta)
    # a warm start from a full-width solution is accepted and lands on the same optimum
    again, _ = fit_binomial_logistic(blocks, succ, trials, 3.0, init=(beta, b0), max_iter=500)
    np.testing.assert_allclose(again, beta, atol=1e-3)
    with pytest.raises(ValueError, match="columns"):
        linear_scores(blocks, beta[:-1])


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


def test_every_convex_predictor_name_has_its_l2_strength_and_known_blocks() -> None:
    from trace_rl.predictor.blocks.registry import block_names
    from trace_rl.predictor.names import CONVEX_FEATURES, DEFAULT_C

    assert set(DEFAULT_C) == set(CONVEX_FEATURES)
    for features in CONVEX_FEATURES.values():
        assert block_names(features)  # every part is a registered feature block
