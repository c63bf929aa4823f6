"""Hand-computed values of TRACE's two objectives and the repeat probability."""

import numpy as np
import pytest

from trace_rl.allocation import flip_probability, mixed_probability, repeat_probability


def test_mixed_probability_hand_values() -> None:
    # v = 0.5, m = 2: 1 - 0.25 - 0.25 = 0.5;  m = 5: 1 - 2 * 0.5**5 = 0.9375
    assert mixed_probability(0.5, 2) == pytest.approx(0.5)
    assert mixed_probability(0.5, 5) == pytest.approx(0.9375)
    # v = 0.9, m = 3: 1 - 0.729 - 0.001 = 0.27
    assert mixed_probability(0.9, 3) == pytest.approx(0.27)
    # fewer than two rollouts can never be mixed (the formula would give -1 at m = 0)
    np.testing.assert_array_equal(mixed_probability([0.5, 0.5], [0, 1]), [0.0, 0.0])
    # certain prompts are never mixed
    np.testing.assert_array_equal(mixed_probability([0.0, 1.0], [8, 8]), [0.0, 0.0])


def test_mixed_probability_broadcasts() -> None:
    out = mixed_probability(np.array([[0.5], [0.9]]), np.array([2, 3]))
    assert out.shape == (2, 2)
    np.testing.assert_allclose(out, [[0.5, 0.75], [0.18, 0.27]])


def test_flip_probability_hand_values() -> None:
    # q = 0.8, k = 2: 1 - 0.64 = 0.36; k = 0 never flips
    np.testing.assert_allclose(flip_probability([0.8, 0.8, 0.5], [2, 0, 3]), [0.36, 0.0, 0.875])


def test_repeat_probability() -> None:
    # r = 1, V = 0.7 -> q = 0.7 ; r = 0, V = 0.7 -> q = 0.3 ; r = 0.5 (partial), V = 0.2 -> 0.1 + 0.4 = 0.5
    np.testing.assert_allclose(repeat_probability([1.0, 0.0, 0.5], [0.7, 0.7, 0.2]), [0.7, 0.3, 0.5])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mixed_probability(1.5, 2), "must lie in"),
        (lambda: mixed_probability(np.nan, 2), "NaN"),
        (lambda: mixed_probability(0.5, -1), "non-negative"),
        (lambda: mixed_probability(0.5, 2.5), "whole"),
        (lambda: flip_probability(-0.1, 1), "must lie in"),
    ],
)
def test_invalid_inputs_raise_value_error(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([True, False], "not booleans"),
        (["0.5", "0.5"], "real numbers"),
        (None, "real numbers"),
        ([0.5 + 0j], "real numbers"),
        ([[0.5], [0.1, 0.2]], "ragged"),
    ],
)
def test_probability_inputs_must_be_real_numbers(value, message) -> None:
    from trace_rl.allocation import allocate_prefixes, allocate_roots

    with pytest.raises(ValueError, match=message):
        allocate_roots(value, 4)
    with pytest.raises(ValueError, match=message):
        allocate_prefixes(value, 4)
