"""TRACE's two allocation objectives: P(mixed group) at a prompt and P(at least one flip) at a prefix.

Both are pure numpy functions that broadcast over their arguments. Source: Zou et al. 2026, "TRACE: A Unified
Rollout Budget Allocation Framework for Efficient Agentic Reinforcement Learning" (arXiv 2606.11119), the
root-allocation objective and the prefix-expansion objective (see docs/paper_index.md).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.validation import FloatArray, as_count, as_probability, as_sibling, as_weight


def mixed_probability(v: npt.ArrayLike, m: npt.ArrayLike) -> FloatArray:
    """Probability that ``m`` independent rollouts of a prompt hold both a success and a failure.

    Equation (TRACE, root allocation):  P_mix(v, m) = 1 - v**m - (1 - v)**m  for m >= 2, and 0 for m < 2
    (a group of zero or one rollout can never be mixed; the formula would give -1 at m = 0).

    Args:
        v: success probability of one rollout, any shape, values in [0, 1].
        m: number of rollouts, non-negative integers, broadcastable against ``v``.

    Returns:
        float64 array of the broadcast shape, values in [0, 1).

    Raises:
        ValueError: ``v`` has NaN or values outside [0, 1]; ``m`` is negative or not whole.
    """
    vv = as_probability(v, "v")
    mm = as_count(m, "m")
    out = 1.0 - np.power(vv, mm) - np.power(1.0 - vv, mm)
    return np.where(mm >= 2, np.maximum(out, 0.0), 0.0)


def flip_probability(q: npt.ArrayLike, k: npt.ArrayLike) -> FloatArray:
    """Probability that at least one of ``k`` replays from a prefix ends differently from the original rollout.

    Equation (TRACE, prefix expansion):  P_flip(q, k) = 1 - q**k, where q = r V + (1 - r)(1 - V) is the chance a
    fresh continuation repeats the original ending r (V: predicted success of the prefix).

    Args:
        q: repeat probability, any shape, values in [0, 1].
        k: number of replays, non-negative integers, broadcastable against ``q``.

    Returns:
        float64 array of the broadcast shape, values in [0, 1]; 0 where k == 0.

    Raises:
        ValueError: ``q`` has NaN or values outside [0, 1]; ``k`` is negative or not whole.
    """
    qq = as_probability(q, "q")
    kk = as_count(k, "k")
    return 1.0 - np.power(qq, kk)


def repeat_probability(reward: npt.ArrayLike, value: npt.ArrayLike) -> FloatArray:
    """Chance that a fresh continuation from a prefix repeats the original rollout's ending.

    Equation (TRACE, prefix expansion):  q = r V + (1 - r)(1 - V), with r the original terminal reward in [0, 1]
    and V the predicted success probability of the prefix.

    Args:
        reward: rewards r of the rollouts the prefixes lie on, shape (J,), values in [0, 1].
        value: predicted success V of each prefix, shape (J,), values in [0, 1].

    Returns:
        float64 array q of shape (J,), values in [0, 1].

    Raises:
        ValueError: NaN or values outside [0, 1] in either argument.
    """
    r = as_probability(reward, "reward")
    vv = as_probability(value, "value")
    return np.clip(r * vv + (1.0 - r) * (1.0 - vv), 0.0, 1.0)


def contrast_value(
    q: npt.ArrayLike,
    k: npt.ArrayLike,
    *,
    unanimous: bool,
    sibling: npt.ArrayLike | None = None,
    weight: float = 1.0,
) -> float:
    """Contrast a prompt's replays add to a tree-aware update: tree term plus ``weight`` times sibling terms.

    Equation (ours, docs/allocation.md "The contrast objective"; motivated by issue 23 and
    benchmarks/prefix_ceiling.py)::

        C(k) = u * (1 - prod_j q_j^k_j)  +  weight * sum_{j in sibling} (1 - q_j^k_j)

    * tree term: u = 1 when the prompt's root rollouts all share one outcome y (then every anchor's rollout ended
      with y, so q_j = P(a replay from anchor j ends with y)) and the term is the chance that at least one replay
      ends otherwise, i.e. the tree becomes mixed; u = 0 for a tree that is already mixed;
    * sibling term of anchor j: the chance that its sibling group (the original continuation plus the k_j
      replays) is mixed, 1 - q_j^k_j (the paper's P_flip). The prompt's own depth-0 anchor (a fresh rollout,
      ``trace_fresh``) has none: its group is the root group, whose mixing is the tree term.

    With ``weight = 1`` and a TreeRPO update, C is the expected number of sibling groups (the root group included)
    that become mixed. For a mixed tree C is ``weight`` times the paper's objective over the turn prefixes.

    Args:
        q: repeat probability of each anchor, shape (J,), values in [0, 1] (`repeat_probability`).
        k: replays per anchor, shape (J,), non-negative integers.
        unanimous: the prompt's root rollouts all share one outcome.
        sibling: bool (J,), which anchors have a sibling group (False for the depth-0 anchor); default all.
        weight: weight of the sibling terms, finite and >= 0.

    Returns:
        C(k), a float in [0, 1 + weight * J].

    Raises:
        ValueError: q not probabilities, k negative or not whole, shapes that differ, a bad weight.
    """
    qq = as_probability(q, "q").reshape(-1)
    kk = as_count(k, "k").reshape(-1)
    sib = as_sibling(sibling, qq.shape[0])
    if kk.shape != qq.shape:
        raise ValueError(f"k must have the shape of q {qq.shape}; got {kk.shape}")
    w = as_weight(weight)
    repeat = np.power(qq, kk)
    tree = (1.0 - float(np.prod(repeat))) if unanimous else 0.0
    return float(tree + w * float(np.sum(np.where(sib, 1.0 - repeat, 0.0))))
