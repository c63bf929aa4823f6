"""Predictor metrics on tiny hand-computed arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trace_rl.predictor.metrics import (
    brier_score,
    error_by_depth,
    expected_calibration_error,
    mse,
    predictor_report,
    rankdata,
    reliability_bins,
    spearman,
)


def test_mse_plain_and_weighted() -> None:
    # errors 0.1, -0.2, 0.3 -> squares 0.01, 0.04, 0.09; mean 0.14 / 3
    assert mse([0.6, 0.3, 0.9], [0.5, 0.5, 0.6]) == pytest.approx(0.14 / 3)
    # weights 1, 0, 3: (0.01 + 3 * 0.09) / 4 = 0.07
    assert mse([0.6, 0.3, 0.9], [0.5, 0.5, 0.6], weights=[1, 0, 3]) == pytest.approx(0.07)
    assert math.isnan(mse([], []))


def test_rankdata_averages_ties() -> None:
    # sorted: 1 (rank 1), 2, 2 (ranks 2 and 3 -> 2.5), 5 (rank 4)
    np.testing.assert_allclose(rankdata([2.0, 1.0, 5.0, 2.0]), [2.5, 1.0, 4.0, 2.5])


def test_spearman_hand_numbers() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks x: 1 2 3, ranks y: 1 3 2; centred: (-1, 0, 1) and (-1, 1, 0): sum of products 1, norms 2 -> 0.5
    assert spearman([0.1, 0.2, 0.3], [5.0, 9.0, 7.0]) == pytest.approx(0.5)
    assert math.isnan(spearman([0.3, 0.3, 0.3], [0.1, 0.5, 0.9]))  # constant input
    assert math.isnan(spearman([0.3], [0.1]))


def test_brier_decomposes_into_squared_error_plus_outcome_variance() -> None:
    # binary targets: plain Brier ((0.8-1)^2 + (0.3-0)^2) / 2 = (0.04 + 0.09) / 2 = 0.065
    assert brier_score([0.8, 0.3], [1.0, 0.0]) == pytest.approx(0.065)
    # one node with 4 leaves, 1 success (t = 0.25), p = 0.5: leaf-level Brier is
    # (0.25 + 3 * 0.25) / 4 = 0.25 = (0.5 - 0.25)^2 + 0.25 * 0.75 = 0.0625 + 0.1875
    assert brier_score([0.5], [0.25]) == pytest.approx(0.25)


def test_reliability_bins_and_ece() -> None:
    pred = [0.05, 0.15, 0.12, 0.95, 1.0]
    target = [0.0, 1.0, 0.0, 1.0, 1.0]
    bins = reliability_bins(pred, target, n_bins=2)
    # bin [0, 0.5): 0.05, 0.15, 0.12 -> mean pred 0.10667, mean target 1/3; bin [0.5, 1]: 0.95, 1.0
    np.testing.assert_array_equal(bins.count, [3, 2])
    np.testing.assert_allclose(bins.mean_pred, [0.32 / 3, 0.975])
    np.testing.assert_allclose(bins.mean_target, [1 / 3, 1.0])
    # ECE = 3/5 * |0.10667 - 0.33333| + 2/5 * |0.975 - 1| = 0.6 * 0.22667 + 0.4 * 0.025 = 0.146
    assert expected_calibration_error(pred, target, n_bins=2) == pytest.approx(0.146)
    empty = reliability_bins([0.1], [0.0], n_bins=4)
    assert np.isnan(empty.mean_pred[1:]).all()


def test_error_by_depth_and_report() -> None:
    pred = [0.5, 0.6, 0.2, 0.4, 0.9]
    target = [0.5, 1.0, 0.0, 0.5, 1.0]
    depth = [0, 0, 1, 1, 2]
    out = error_by_depth(pred, target, depth)
    assert sorted(out) == [0, 1, 2]
    # depth 0: (0 + 0.16) / 2 = 0.08; depth 1: (0.04 + 0.01) / 2 = 0.025; depth 2: 0.01
    assert out[0].mse == pytest.approx(0.08)
    assert out[1].mse == pytest.approx(0.025)
    assert out[2].count == 1 and out[2].mse == pytest.approx(0.01)
    assert out[1].spearman == pytest.approx(1.0)
    report = predictor_report(pred, target, depth)
    assert report["predictor/mse_prompt"] == pytest.approx(0.08)
    # prefix nodes: (0.04 + 0.01 + 0.01) / 3 = 0.02
    assert report["predictor/mse_prefix"] == pytest.approx(0.02)
    assert report["predictor/count_depth_1"] == 2.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mse([0.5, np.nan], [0.5, 0.5]), "NaN"),
        (lambda: mse([0.5, 1.5], [0.5, 0.5]), r"\[0, 1\]"),
        (lambda: mse([0.5], [0.5, 0.5]), "same length"),
        (lambda: mse([0.5], [0.5], weights=[-1.0]), "non-negative"),
        (lambda: mse([0.5], [0.5], weights=[0.0]), "positive sum"),
        (lambda: reliability_bins([0.5], [0.5], n_bins=0), "n_bins"),
        (lambda: error_by_depth([0.5], [0.5], [-1]), "depth"),
        (lambda: error_by_depth([0.5], [0.5], [0.5]), "depth"),
        (lambda: spearman([[1.0]], [[1.0]]), "1-d"),
    ],
)
def test_bad_input_raises_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
