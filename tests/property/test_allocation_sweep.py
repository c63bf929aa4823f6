"""The vectorised root sweep (issue 16): every number of active prompts, big enough for many buckets."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trace_rl.allocation.roots as roots
from tests.property.test_allocation_exact import dp_optimum
from trace_rl.allocation import allocate_roots, mixed_probability

probs = st.one_of(st.sampled_from([0.0, 0.03, 0.5, 0.8, 1.0]), st.floats(0.0, 1.0))


def walk(g_rank, g_val, s, k):
    """Direct per point: the first k[t] positions whose row is < s[t]."""
    boundary, chosen = [], []
    for s_t, k_t in zip(s.tolist(), k.tolist(), strict=True):
        on = g_rank < s_t
        if k_t == 0:
            boundary.append(0)
            chosen.append(0.0)
            continue
        b = int(np.searchsorted(np.cumsum(on), k_t)) + 1
        boundary.append(b)
        chosen.append(float(g_val[:b][on[:b]].sum()))
    return np.array(boundary), np.array(chosen)


@settings(max_examples=60, deadline=None)
@given(
    v=st.lists(probs, min_size=20, max_size=120),
    low=st.integers(1, 3),
    width=st.integers(3, 20),
    data=st.data(),
)
def test_sweep_matches_the_direct_walk(v, low, width, data) -> None:
    v = np.sort(np.array(v))
    g_rank, g_val = roots._greedy_order(roots._mixed_increments(v, low, width))
    assert g_rank.size > 16 * 3  # several buckets
    n = v.size
    s_lo = data.draw(st.integers(1, n))
    s = np.array(sorted(set(data.draw(st.lists(st.integers(s_lo, n), min_size=1, max_size=40)))))
    k_max = s_lo * width
    k0 = data.draw(st.integers(0, k_max))
    step = data.draw(st.integers(0, 3))
    k = np.maximum(k0 - step * (s - s[0]), 0)
    got_b, got_c = roots._sweep_boundaries(g_rank, g_val, s, k)
    ref_b, ref_c = walk(g_rank, g_val, s, k)
    np.testing.assert_array_equal(got_b, ref_b)
    np.testing.assert_allclose(got_c, ref_c, rtol=1e-12, atol=1e-12)


def test_greedy_order_is_a_stable_sort_with_ties() -> None:
    inc = np.array([[0.5, 0.25, 0.25], [0.5, 0.25, 0.0], [0.3, 0.3, 0.0]])
    rows, vals = roots._greedy_order(inc)
    ref = np.argsort(-inc.ravel(), kind="stable")
    np.testing.assert_array_equal(rows, ref // 3)
    np.testing.assert_array_equal(vals, inc.ravel()[ref])


@pytest.mark.parametrize("chunk", [64, 3, 1])
def test_all_sweep_points_tie_fewest_active_prompts_win(monkeypatch, chunk) -> None:
    # v = 0 or 1 everywhere: every allocation scores 0, every sweep point survives the bound; fewest prompts
    # win, also when the survivors are solved a few at a time and the solver stops early
    monkeypatch.setattr(roots, "_SWEEP_CHUNK", chunk)
    v = np.array([0.0, 1.0] * 40)
    m = allocate_roots(v, 100, max_rollouts=10)
    assert m.sum() == 100 and (m > 0).sum() == 10


@settings(max_examples=60, deadline=None)
@given(v=st.lists(probs, min_size=3, max_size=14), budget=st.integers(4, 50), cap=st.integers(2, 8))
def test_chunked_pruned_sweep_is_optimal(v, budget, cap) -> None:
    v = np.array(v)
    best = dp_optimum(v, budget, cap)
    if best is None:
        return
    saved = roots._FIRST_CANDIDATES, roots._SWEEP_CHUNK
    roots._FIRST_CANDIDATES, roots._SWEEP_CHUNK = 1, 1
    try:
        m = allocate_roots(v, budget, max_rollouts=cap)
    finally:
        roots._FIRST_CANDIDATES, roots._SWEEP_CHUNK = saved
    np.testing.assert_allclose(mixed_probability(v, m).sum(), best, atol=1e-9)
    assert (m > 0).sum() == (allocate_roots(v, budget, max_rollouts=cap) > 0).sum()  # same tie-break


@pytest.mark.parametrize(
    ("v", "budget", "cap"),
    [([0.863, 0.541, 0.3, 0.423], 4, 4), ([0.02, 0.02, 0.5, 0.646, 0.02, 0.646, 0.646, 0.02, 0.02], 24, 4)],
)
def test_pruning_fallback_reaches_the_optimum(monkeypatch, v, budget, cap) -> None:
    # In these cases the number of active prompts with the best bound is not the optimal one: with a single
    # first candidate the solver must fall back to the pruned sweep and still reach the DP's optimum.
    v = np.array(v)
    monkeypatch.setattr(roots, "_FIRST_CANDIDATES", 1)
    m = allocate_roots(v, budget, max_rollouts=cap)
    np.testing.assert_allclose(mixed_probability(v, m).sum(), dp_optimum(v, budget, cap), atol=1e-12)
