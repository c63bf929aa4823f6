"""`trace_adaptive` (ours, issue 58): GRPO's allocation until the run has measured that its predictor ranks
prompts, then TRACE's root objective under the predictor's measured uncertainty, with a coverage floor and a
per-step split between roots and replays.

TRACE's root objective counts groups that are mixed, ``sum_i 1 - v_i^m_i - (1 - v_i)^m_i`` (Zou et al. 2026,
arXiv 2606.11119), and treats the estimates v_i as the truth. On the `agentic` preset every method that selects
prompts trained a worse agent than GRPO (docs/results.md); its predictor there hardly ranks prompts (out-of-fold
Spearman 0.10), while on the demo it ranks (0.69) and selection pays. This module selects only where the run's own
outcomes show that the estimates rank (docs/allocation.md, "trace_adaptive"):

1. **A ranking test.** The estimates are recalibrated, ``mu = sigmoid(alpha + beta logit v)``, and a prompt's
   success modelled as ``u ~ Beta(kappa mu, kappa (1 - mu))``; (alpha, beta, kappa) maximise the beta-binomial
   likelihood of the root outcomes of the last `WINDOW_STEPS` steps (`fit_calibration`). The likelihood-ratio
   statistic against beta = 0 (`Calibration.ranking_lr`) must reach `RANKING_CRITICAL`; until it does, the step
   takes GRPO's plan (`grpo_roots`: uniform prompts, ``group_size`` roots each, no replays).
2. **The paper's objective in expectation.** Once it ranks, ``max sum_i E_u[P_mix(u_i, m_i)]`` (closed form: for
   integer m, ``E[u^m] = prod_{j<m} (a + j) / (a + b + j)``), solved exactly with a cardinality limit
   (`allocate_table`); kappa = inf with the identity is the paper's allocation. The alternative ``"dof"``
   objective values a group by the squared-advantage mass GRPO's update gets from it, ``(m - 1) E[P_mix]``
   (`contrastive_value`); it is not the default (docs/allocation.md says why).
3. **A coverage floor.** A share ``coverage`` of the prompts a selecting step trains on (rounded up) is drawn
   uniformly at random from the pool and must be active, so selection cannot narrow the training distribution.
4. **Roots or replays, per step.** A replay turns an unmixed tree mixed when its ending flips; with the recent
   flips per replay (`AdaptiveState`) the split's value is its roots' plus `_replay_gain`, against the value of
   spending the whole budget on roots; a step with replays is forced every ``REEXPLORE_STEPS`` steps so that the
   flip rate stays measured.

Pure numpy; the trainer owns one `AdaptiveState` per run and checkpoints it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.allocation.budget import BudgetShape, uniform_batch
from trace_rl.allocation.posterior import (
    ALPHA_GRID,
    BETA_GRID,
    KAPPA_GRID,
    PRIOR_CONCENTRATION,
    RANKING_CRITICAL,
    Calibration,
    beta_binomial_loglik,
    contrastive_value,
    expected_mixed_probability,
    expected_power,
    fit_calibration,
    fit_concentration,
)
from trace_rl.allocation.validation import FloatArray, IntArray, as_probability_vector
from trace_rl.types import RootPlan

__all__ = [
    "ALPHA_GRID",
    "BETA_GRID",
    "COVERAGE",
    "KAPPA_GRID",
    "MIN_WINDOW_PROMPTS",
    "OBJECTIVES",
    "PRIOR_CONCENTRATION",
    "PRIOR_FLIP_RATE",
    "RANKING_CRITICAL",
    "REEXPLORE_STEPS",
    "SUCCESS_REWARD",
    "UNCAPPED_GROUPS",
    "WINDOW_STEPS",
    "AdaptiveState",
    "Calibration",
    "adaptive_roots",
    "allocate_table",
    "beta_binomial_loglik",
    "contrastive_value",
    "expected_mixed_probability",
    "expected_power",
    "fit_calibration",
    "fit_concentration",
]

WINDOW_STEPS = 10
"""Steps of outcomes `AdaptiveState` keeps for the concentration fit and the flip rate."""
MIN_WINDOW_PROMPTS = 24
"""Fewest prompts (with >= 2 trials) in the window before the calibration is fitted; until then the prior reading
(`Calibration()`, which does not rank: GRPO's plan)."""
PRIOR_FLIP_RATE = 0.25
"""Flips per replay assumed before any replay of the run was observed."""
REEXPLORE_STEPS = 10
"""A step spends its replay share on replays at least once every this many steps (keeps the flip rate measured)."""
UNCAPPED_GROUPS = 2
"""Without ``max_rollouts``, `adaptive_roots` caps a prompt's rollouts at this many times ``group_size``."""
SUCCESS_REWARD = 0.5
"""A root rollout counts as a success for the calibration fit at reward >= this (binary rewards)."""
COVERAGE = 0.25
"""Default share of a step's active prompts drawn uniformly from the pool (``budget.coverage``)."""
OBJECTIVES = ("mixed", "dof")
"""Root objectives of `adaptive_roots`: the expected mixed groups (the paper's, under the posterior) or the
expected squared-advantage mass (`contrastive_value`)."""


# ------------------------------------------------------------------------------------------------ the math
def allocate_table(
    values: npt.ArrayLike,
    budget: int,
    *,
    min_rollouts: int = 2,
    max_active: int | None = None,
    forced: npt.ArrayLike | None = None,
) -> IntArray:
    """Exact separable allocation with a cardinality limit and forced items, by dynamic program.

    max sum_i values[i, m_i]  s.t.  sum_i m_i = budget, m_i in {0} U [min_rollouts, K], at most ``max_active``
    items with m_i > 0, and m_i >= min_rollouts for every forced item. O(P K budget A) time.

    Args:
        values: float (P, K + 1), finite. budget: integer >= 0. min_rollouts: >= 1.
        max_active: None = P. forced: bool (P,) or None.

    Returns:
        int64 (P,) m.

    Raises:
        ValueError: malformed input, or no allocation meets the constraints (e.g. the budget exceeds
            max_active * K, or the forced items need more than it).
    """
    table = np.asarray(values, dtype=np.float64)
    if table.ndim != 2 or table.shape[1] < 1 or not np.all(np.isfinite(table)):
        raise ValueError(f"values must be a finite (P, K + 1) array; got shape {table.shape}")
    p, width = table.shape
    if budget < 0 or min_rollouts < 1 or (max_active is not None and max_active < 0):
        raise ValueError(
            f"budget and max_active must be >= 0 and min_rollouts >= 1; got {budget}, {max_active}, {min_rollouts}"
        )
    cap_active = p if max_active is None else min(int(max_active), p)
    must = np.zeros(p, dtype=bool) if forced is None else np.asarray(forced, dtype=bool)
    if must.shape != (p,):
        raise ValueError(f"forced must be a bool array of shape ({p},)")
    neg = -np.inf
    best = np.full((budget + 1, cap_active + 1), neg)
    best[0, 0] = 0.0
    choice = np.zeros((p, budget + 1, cap_active + 1), dtype=np.int64)
    counts = [0, *range(min_rollouts, width)]
    for i in range(p):
        new = np.full_like(best, neg)
        pick = np.zeros((budget + 1, cap_active + 1), dtype=np.int64)
        for m in counts:
            if (m == 0 and must[i]) or m > budget:
                continue
            step = 1 if m > 0 else 0
            cand = np.full_like(best, neg)
            cand[m:, step:] = best[: budget + 1 - m, : cap_active + 1 - step] + table[i, m]
            better = cand > new
            new = np.where(better, cand, new)
            pick = np.where(better, m, pick)
        best, choice[i] = new, pick
    a_end = int(np.argmax(best[budget]))
    if best[budget, a_end] == neg:
        raise ValueError(
            f"no allocation of {budget} rollouts meets the limits ({p} prompts, {min_rollouts}..{width - 1} each, "
            f"at most {cap_active} active, {int(must.sum())} forced)"
        )
    out = np.zeros(p, dtype=np.int64)
    b, a = budget, a_end
    for i in range(p - 1, -1, -1):
        out[i] = choice[i, b, a]
        b -= int(out[i])
        a -= int(out[i] > 0)
    return out


# ------------------------------------------------------------------------------------------- the state
class AdaptiveState:
    """What `trace_adaptive` has measured on the last `WINDOW_STEPS` steps: the estimates it allocated with next
    to the root outcomes they met (for kappa), and its replays' flips (for the roots-or-replays split).

    Attributes:
        outcomes: per step, arrays (v, successes, trials) of the active prompts.
        flips: per step with replays, (replays, flips).
        since_replays: steps since the last step that spent its replay share on replays.
    """

    def __init__(self, window: int = WINDOW_STEPS) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.outcomes: deque[tuple[list[float], list[int], list[int]]] = deque(maxlen=window)
        self.flips: deque[tuple[int, int]] = deque(maxlen=window)
        self.since_replays = 0

    def observe(
        self,
        v: npt.ArrayLike,
        successes: npt.ArrayLike,
        trials: npt.ArrayLike,
        *,
        replays: int,
        flips: int,
        estimates_used: bool,
    ) -> None:
        """Record one step: the active prompts' estimates and root outcomes (only when ``estimates_used``: the
        allocation read a warm predictor), and the replays it generated and how many flipped.

        Raises:
            ValueError: shapes differ, flips outside [0, replays], or successes outside [0, trials].
        """
        p = np.asarray(v, dtype=np.float64).ravel()
        k = np.asarray(successes, dtype=np.int64).ravel()
        n = np.asarray(trials, dtype=np.int64).ravel()
        if k.shape != p.shape or n.shape != p.shape:
            raise ValueError("v, successes and trials must have one shape")
        if not 0 <= flips <= replays:
            raise ValueError(f"flips must lie in [0, replays]; got {flips} of {replays}")
        if np.any(k < 0) or np.any(k > n):
            raise ValueError("successes must lie in [0, trials]")
        if estimates_used and p.size:
            self.outcomes.append((p.tolist(), k.tolist(), n.tolist()))
        if replays > 0:
            self.flips.append((int(replays), int(flips)))
            self.since_replays = 0
        else:
            self.since_replays += 1

    def calibration(self) -> Calibration:
        """The `Calibration` fitted on the window (`fit_calibration`); the identity with `PRIOR_CONCENTRATION`
        below `MIN_WINDOW_PROMPTS` prompts."""
        v = [x for step in self.outcomes for x in step[0]]
        k = [x for step in self.outcomes for x in step[1]]
        n = [x for step in self.outcomes for x in step[2]]
        if sum(t >= 2 for t in n) < MIN_WINDOW_PROMPTS:  # prompts with one trial say nothing about kappa
            return Calibration()
        return fit_calibration(v, k, n)

    def observe_rewards(
        self,
        v: npt.ArrayLike,
        root_rewards: Sequence[Sequence[float]],
        *,
        replays: int,
        flips: int,
        estimates_used: bool,
    ) -> None:
        """`observe` from each active prompt's root rewards: a root succeeds at reward >= `SUCCESS_REWARD`."""
        self.observe(
            v,
            [sum(float(r) >= SUCCESS_REWARD for r in rewards) for rewards in root_rewards],
            [len(rewards) for rewards in root_rewards],
            replays=replays,
            flips=flips,
            estimates_used=estimates_used,
        )

    def concentration(self) -> float:
        """kappa of `calibration`."""
        return self.calibration().kappa

    def flip_rate(self) -> float:
        """Flips per replay over the window's steps with replays; `PRIOR_FLIP_RATE` when there were none."""
        replays = sum(r for r, _ in self.flips)
        return sum(f for _, f in self.flips) / replays if replays else PRIOR_FLIP_RATE

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "outcomes": [[list(step[0]), list(step[1]), list(step[2])] for step in self.outcomes],
            "flips": [list(x) for x in self.flips],
            "since_replays": self.since_replays,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict`. Raises ValueError on a malformed state."""
        try:
            window = int(state["window"])
            outcomes = [(list(s[0]), list(s[1]), list(s[2])) for s in state["outcomes"]]
            flips = [(int(r), int(f)) for r, f in state["flips"]]
            since = int(state["since_replays"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"trace_adaptive state is malformed: {exc}") from None
        self.window = window
        self.outcomes = deque(outcomes, maxlen=window)
        self.flips = deque(flips, maxlen=window)
        self.since_replays = since


# ----------------------------------------------------------------------------------- the root strategy
def adaptive_roots(
    v: FloatArray,
    shape: BudgetShape,
    rng: np.random.Generator,
    state: AdaptiveState,
    *,
    coverage: float = COVERAGE,
    normalize_std: bool = True,
    objective: str = "mixed",
) -> RootPlan:
    """`trace_adaptive`'s root allocation (module docstring): GRPO's plan until the run's outcomes show that the
    predictor ranks prompts, then the exact allocation under the calibrated posterior with a coverage floor and the
    per-step choice between the paper's split (M roots + N m_i replays each) and spending the whole budget on roots.

    1. ``state.calibration()``; if it does not rank (`Calibration.ranks`: too few outcomes, or the
       likelihood-ratio test of beta > 0 fails), the plan is `grpo_roots`' (``batch_size`` uniform prompts,
       ``group_size`` roots each, no replays), drawn from ``rng`` exactly as GRPO draws it.
    2. Otherwise the value table (``objective``: ``"mixed"``, ``E[P_mix(u, m)]``, or ``"dof"``,
       `contrastive_value`) of the calibrated means, m up to ``max_rollouts`` (``UNCAPPED_GROUPS * group_size``
       without it), is solved exactly (`allocate_table`) for both candidate budgets with at most ``batch_size``
       active prompts, m_i in {0} U [min_rollouts, cap]; the coverage floor then solves again with the same number
       A of active prompts, ``ceil(coverage * A)`` of them drawn uniformly from the pool and forced active.
    3. The split replays when its value beats the all-roots plan's (`_replay_gain`) or when the run has not
       replayed for ``REEXPLORE_STEPS`` steps.

    ``plan.info`` holds ``ranks`` (1/0), ``ranking_lr``, ``kappa``, ``calibration_alpha``, ``calibration_beta``,
    ``replays_on`` (1/0), ``flip_rate``, ``value_split``, ``value_roots`` and ``covered`` (the last three 0 on
    GRPO's plan).

    Raises:
        ValueError: bad v, coverage outside [0, 1], an unknown objective, or a budget the limits cannot place.
    """
    probs = as_probability_vector(v, "v")
    if not 0.0 <= coverage <= 1.0:
        raise ValueError(f"coverage must lie in [0, 1], got {coverage}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    p = probs.shape[0]
    cal = state.calibration()
    rate = state.flip_rate()
    info = {
        "ranks": float(cal.ranks),
        "ranking_lr": cal.ranking_lr,
        "kappa": cal.kappa,
        "calibration_alpha": cal.alpha,
        "calibration_beta": cal.beta,
        "replays_on": 0.0,
        "flip_rate": rate,
        "value_split": 0.0,
        "value_roots": 0.0,
        "covered": 0.0,
    }
    if not cal.ranks:  # GRPO's plan, drawn as `grpo_roots` draws it
        uniform = np.zeros(p, dtype=np.int64)
        uniform[uniform_batch(p, shape.batch_size, rng)] = shape.group_size
        return RootPlan(uniform, np.zeros(p, dtype=np.float64), method="trace_adaptive", info=info)
    flat = shape.flat_rollouts
    # the "dof" value is linear in m once a group is mixed: without a cap it would put the budget on one prompt
    cap = min(shape.max_rollouts or UNCAPPED_GROUPS * shape.group_size, flat)
    mean = cal.mean(probs)
    if objective == "dof":
        table = contrastive_value(mean, cap, cal.kappa, normalize_std=normalize_std)
    else:
        table = np.zeros((p, cap + 1), dtype=np.float64)
        for size in range(2, cap + 1):
            table[:, size] = expected_mixed_probability(mean, size, cal.kappa)
    order = rng.permutation(p)  # uniform draws for the floor; also the tie order among equal prompts

    def solve(budget: int) -> tuple[IntArray, float, int]:
        t = table[order]
        free = allocate_table(t, budget, min_rollouts=shape.min_rollouts, max_active=shape.batch_size)
        active = int(np.count_nonzero(free))
        n_cov = min(math.ceil(coverage * active), p)
        forced = np.zeros(p, dtype=bool)
        forced[:n_cov] = True  # the first prompts of a uniform permutation: a uniform draw from the pool
        # as many prompts as the objective chose, n_cov of them the uniform draws
        m = allocate_table(t, budget, min_rollouts=shape.min_rollouts, max_active=active, forced=forced)
        out = np.zeros(p, dtype=np.int64)
        out[order] = m
        return out, float(t[np.arange(p), m].sum()), n_cov

    m_split, u_split, cov_split = solve(shape.roots)
    m_roots, u_roots, cov_roots = solve(flat)
    replays = shape.continuations * m_split
    value_split = u_split + _replay_gain(table, m_split, replays, rate, objective)
    # no replays to buy (N = 0, e.g. the demo preset): the two plans are the same all-roots plan
    on = bool(replays.sum() > 0) and (value_split > u_roots or state.since_replays + 1 >= REEXPLORE_STEPS)
    m = m_split if on else m_roots
    info.update(
        replays_on=float(on),
        value_split=value_split,
        value_roots=u_roots,
        covered=float(cov_split if on else cov_roots),
    )
    budget = m.astype(np.float64) * (shape.continuations if on else 0)
    return RootPlan(rollouts=m, replay_budget=budget, method="trace_adaptive", info=info)


def _replay_gain(table: FloatArray, m: IntArray, replays: IntArray, rate: float, objective: str) -> float:
    """Expected value the split plan's replays add, in the objective's units, at ``rate`` flips per replay:

    - ``"mixed"``: a replay can only turn an unmixed tree mixed, so ``sum_i (1 - E[P_mix_i(m_i)]) (1 - (1 -
      rate)^r_i)`` with r_i = ``replays[i]`` (each replay flips independently);
    - ``"dof"``: a flip adds one contrastive degree of freedom (its sibling pair), ``rate * sum_i r_i``.
    """
    if objective == "dof":
        return float(rate * replays.sum())
    mixed = table[np.arange(m.shape[0]), m]
    active = m > 0
    return float(np.sum((1.0 - mixed[active]) * (1.0 - (1.0 - rate) ** replays[active])))
