"""Properties of anchor serialization and the predictor metrics (hypothesis)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trace_rl.predictor.metrics import brier_score, expected_calibration_error, mse, rankdata, spearman
from trace_rl.predictor.serialize import serialize_anchor
from trace_rl.types import Turn

plain = st.text(alphabet="abcdefghij klmnop\n0123456789+-*=", max_size=300)
turn = st.builds(Turn, text=plain, observation=plain)


@settings(max_examples=200, deadline=None)
@given(prompt=plain, turns=st.lists(turn, max_size=8), max_chars=st.integers(64, 1500))
def test_serialization_budget_prompt_and_recency(prompt: str, turns: list[Turn], max_chars: int) -> None:
    text = serialize_anchor(prompt, turns, max_chars=max_chars)
    assert len(text) <= max_chars
    assert text.startswith("[PROMPT]\n")
    if len("[PROMPT]\n" + prompt + "\n") <= max_chars // 2:
        assert text.startswith("[PROMPT]\n" + prompt + "\n")  # a prompt within half the budget is never cut
    kept = [int(k) for k in re.findall(r"\[TURN (\d+)\]", text)]
    if kept:  # the kept turns are the most recent ones, in order, ending at the anchor
        assert kept == list(range(kept[0], len(turns) + 1))
    if (
        sum(len(t.text) + len(t.observation) for t in turns) + len(prompt) + 40 * (len(turns) + 1)
        <= max_chars
    ):
        assert kept == list(range(1, len(turns) + 1))  # everything fits: nothing is dropped


probs = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=40)


@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.integers(-5, 5), min_size=1, max_size=30))
def test_rankdata_matches_brute_force(x: list[int]) -> None:
    a = np.array(x, dtype=float)
    brute = [1 + np.sum(a < v) + (np.sum(a == v) - 1) / 2 for v in a]
    np.testing.assert_allclose(rankdata(a), brute)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(2, 40))
def test_spearman_bounds_and_monotone_invariance(data: st.DataObject, n: int) -> None:
    x = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    y = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    rho = spearman(x, y)
    if np.isnan(rho):
        assert np.ptp(x) == 0 or np.ptp(y) == 0
        return
    assert -1.0 <= rho <= 1.0
    assert spearman(8.0 * x, y) == rho  # ranks are unchanged by an (exact) increasing map
    assert spearman(x, -y) == -rho
    assert spearman(x, y) == spearman(y, x)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_calibration_and_brier_relations(data: st.DataObject, n: int) -> None:
    p = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    t = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    ece = expected_calibration_error(p, t)
    assert 0.0 <= ece <= 1.0
    assert expected_calibration_error(p, p) < 1e-12  # perfect predictions are calibrated
    assert abs(brier_score(p, t) - mse(p, t) - float(np.mean(t * (1 - t)))) < 1e-12
