"""Learning curves: held-out pass@1 against the compute generated so far, and their summaries (numpy only).

    learning_curve(records)                   -> LearningCurve   one run: accuracy at each evaluation and the
                                                                 cumulative spend up to and including its step
    final_accuracy(curve)                     -> 0.412           mean of the last two evaluations after step 0
    area_under_curve(x, y, low, high)         -> 0.398           mean pass@1 over the budget range [low, high]
    first_crossing(x, y, target)              -> 8,704.0         rollouts at which the curve first reaches target
    common_range(curves)                      -> (0.0, 12,800.0) the budget range every run covers
    band(curves, grid, axis)                  -> Band            mean over seeds and its 95 % t-interval on a grid
    run_cost(records)                         -> {...}           generated rollouts, rollout-equivalents, tokens,
                                                                 tool calls: per step and in total
    step_means(train, fields)                 -> {...}           per-step means of the fields every record logs
    curve_summaries(curves, baseline, axis)   -> per method, per seed: final accuracy, AUC, spend to the
                                                 baseline's final accuracy (names: summary_keys(axis)), and
                                                 that spend against the baseline's own first crossing of its
                                                 final (names: crossing_keys(axis))
    matched_finals(curves, baseline)          -> per method, per seed: accuracy at the spend of the baseline's
                                                 final evaluations, or NaN and flagged where not covered
    paired_interval(values, baseline_values)  -> (mean, half-width, n) of the per-seed differences
    curves_document(curves, baseline)         -> the content of compare's curves.json

Definitions (docs/training.md, "Learning curves"):

- The spend axes are cumulative sums over the run's training records with ``step <= s`` for the evaluation at
  step s, plus what the run was charged before its first step (the evaluation at step 0, before RL, sits there):
  the warm start's probe, for a method that reads the predictor (its ``predictor_warm_start`` record's
  ``charged_*`` fields, `CHARGE_FIELDS`; 0 for a method that does not, and for logs made before the charge):
  ``rollouts``: rollouts generated, discarded ones included (the step record's ``rollouts_generated``; a record
  without that field counts its ``budget_spent`` instead); ``rollout_equivalents``: ``budget_spent`` (a root
  rollout costs 1, a replay ``budget.replay_cost``); ``tokens``: ``tokens_generated``; ``tool_calls``.
- Curves are piecewise linear between consecutive evaluations (``numpy.interp``) and never extrapolated: a run
  covers the range from its first to its last evaluation.
- Final accuracy: the mean of the last two evaluations after RL started (step > 0); the one evaluation if there
  is only one; NaN if there is none.
- AUC: ``(1 / (high - low)) * integral_low^high acc(x) dx`` on the rollouts axis, over the range every run of the
  comparison covers (``common_range``), i.e. the mean pass@1 over that budget range, in [0, 1]; the trapezoid rule
  is exact for the piecewise-linear curve.
- Rollouts to the baseline's final accuracy: the first x at which the run's curve reaches the final accuracy of
  the baseline's run with the same seed (runs with one seed start from one policy and draw the same candidate
  pools), linearly interpolated between the two evaluations around the crossing; NaN (not reached) if it never
  does. Its ``_share`` divides by the baseline run's rollouts at its last evaluation (the baseline's whole run);
  ``_crossing_share`` divides by the baseline run's own first crossing of its final accuracy (a baseline
  that gets there early is not credited with the rest of its run; ``crossing_keys``).
- Final accuracy at the baseline's spend (``matched_finals``): the mean of the run's curve at the spends of the
  baseline run's (same seed) last two evaluations, on the rollout-equivalents axis (the unit of the equal
  budget), so a method that stops elsewhere (dapo stops when its budget cannot pay another draw) is read at the
  same spend; NaN with ``final_spend_matched`` 0 where the run does not cover those spends.
- The same AUC and crossing on the rollout-equivalents axis (the unit of compare's equal ``total_budget``, where a
  replay costs ``budget.replay_cost``): ``auc_rollout_equivalents``, ``rollout_equivalents_to_baseline_final``
  and its ``_share`` (``summary_keys``).
- Intervals: two-sided 95 % Student-t over seeds (``trace_rl.metrics.summary.t_interval``); paired ones on the
  per-seed differences against the baseline, over the seeds where both values are finite.

The records are the lines of a run's metrics.jsonl (DESIGN.md: metrics are pure functions of records).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trace_rl.metrics.numbers import finite_or_none as finite_or_none  # re-exported: its old home
from trace_rl.metrics.numbers import number
from trace_rl.metrics.summary import eval_records, t_interval, train_records

Record = Mapping[str, Any]

AXES = ("rollouts", "rollout_equivalents", "tokens", "tool_calls")
AXIS_FIELDS = {  # axis -> the step-record field summed along it
    "rollouts": "rollouts_generated",
    "rollout_equivalents": "budget_spent",
    "tokens": "tokens_generated",
    "tool_calls": "tool_calls",
}
SUMMARY_AXES = ("rollouts", "rollout_equivalents")  # the axes compare and the report summarise
CHARGE_FIELDS = {  # axis -> the field of a predictor_warm_start record charging the run before step 1
    "rollouts": "charged_rollouts",
    "rollout_equivalents": "charged_budget",
    "tokens": "charged_tokens",
    "tool_calls": "charged_tool_calls",
}
MATCHED_KEYS = ("final_accuracy_at_baseline_spend", "final_spend_matched")
"""Names of `matched_finals`'s two values."""


def crossing_keys(axis: str = "rollouts") -> tuple[str, str]:
    """Names of (the baseline run's own first crossing of its final accuracy, the run's spend to the baseline's
    final as a share of that crossing) on an axis: ("<axis>_baseline_crossing",
    "<axis>_to_baseline_final_crossing_share").

    Raises:
        ValueError: an unknown axis.
    """
    summary_keys(axis)  # validates
    return f"{axis}_baseline_crossing", f"{axis}_to_baseline_final_crossing_share"


def charged(records: Sequence[Record], axis: str) -> float:
    """What the run was charged along ``axis`` before its first step: the sum of its ``predictor_warm_start``
    records' `CHARGE_FIELDS` field; 0 where absent (no charge, or a log from before the charge), NaN where
    present but unknown (None: a probe file that did not record its tokens)."""
    total = 0.0
    for r in records:
        if r.get("kind") == "predictor_warm_start" and CHARGE_FIELDS[axis] in r:
            total += number(r[CHARGE_FIELDS[axis]])
    return total


def summary_keys(axis: str = "rollouts") -> tuple[str, str, str]:
    """Names of (AUC, spend to the baseline's final accuracy, its share) on an axis:
    ("auc", "rollouts_to_baseline_final", "rollouts_to_baseline_final_share") on ``rollouts``, else
    ("auc_<axis>", "<axis>_to_baseline_final", "<axis>_to_baseline_final_share").

    Raises:
        ValueError: an unknown axis.
    """
    if axis not in AXES:
        raise ValueError(f"unknown learning-curve axis {axis!r}; expected one of {', '.join(AXES)}")
    auc = "auc" if axis == "rollouts" else f"auc_{axis}"
    return auc, f"{axis}_to_baseline_final", f"{axis}_to_baseline_final_share"


@dataclass(frozen=True)
class LearningCurve:
    """One run's held-out pass@1 at each evaluation, against the spend up to and including that step.

    ``rollouts_logged`` is False when some training record lacked ``rollouts_generated`` (budget_spent stood in).
    """

    step: np.ndarray  # (E,) int64, ascending evaluation steps
    accuracy: np.ndarray  # (E,) held-out pass@1 in [0, 1]
    rollouts: np.ndarray  # (E,) cumulative generated rollouts
    rollout_equivalents: np.ndarray  # (E,) cumulative budget_spent
    tokens: np.ndarray  # (E,) cumulative generated tokens (NaN where a record lacked tokens_generated)
    tool_calls: np.ndarray  # (E,) cumulative tool calls (NaN likewise)
    rollouts_logged: bool = True
    probe_rollouts: float = 0.0  # rollouts charged before step 1 (the warm start's probe; `charged`)

    def axis(self, name: str) -> np.ndarray:
        """The spend along one of ``AXES``.

        Raises:
            ValueError: an unknown axis name.
        """
        if name not in AXES:
            raise ValueError(f"unknown learning-curve axis {name!r}; expected one of {', '.join(AXES)}")
        return np.asarray(getattr(self, name))


def _field_values(train: Sequence[Record], field: str) -> list[float]:
    """Per training record its ``field`` as a float (`number`: NaN if absent or not a number), except that a
    record without ``rollouts_generated`` counts its ``budget_spent`` there."""
    if field == "rollouts_generated":
        return [number(r[field]) if field in r else number(r.get("budget_spent")) for r in train]
    return [number(r.get(field)) for r in train]


def step_spend(train: Sequence[Record], axis: str) -> list[float]:
    """Per training record, what it adds along ``axis``: its ``AXIS_FIELDS[axis]`` field (NaN if absent), except
    on ``rollouts``, where a record without ``rollouts_generated`` counts its ``budget_spent``."""
    return _field_values(train, AXIS_FIELDS[axis])


def step_means(train: Sequence[Record], fields: Sequence[str], *, totals: bool = False) -> dict[str, float]:
    """Per field, the mean over the training records (and with ``totals`` their sum, as ``<field>_total``, right
    after it), for the fields every record logs as a finite number (`is_finite_number`); a field some record lacks
    (absent, None, NaN, not a number) is left out, as is every field when there is no record. A record without
    ``rollouts_generated`` counts its ``budget_spent`` there (`step_spend`).

    The one per-step average of `run_cost` and `trace_rl.train.rundir.summarize`.
    """
    out: dict[str, float] = {}
    for field in fields:
        values = _field_values(train, field)
        if values and all(math.isfinite(v) for v in values):
            out[field] = float(np.mean(values))
            if totals:
                out[f"{field}_total"] = float(np.sum(values))
    return out


def learning_curve(records: Sequence[Record]) -> LearningCurve:
    """One run's learning curve from its metrics.jsonl records.

    For the evaluation at step s: ``accuracy = eval_accuracy`` and, on every axis, what the run was charged
    before step 1 (`charged`: the probe) plus the sum of the training records' field over ``step <= s``
    (``rollouts``: ``rollouts_generated``, else that record's ``budget_spent``).
    Evaluations without a finite ``eval_accuracy`` are left out; a step evaluated twice keeps its last record.

    Raises:
        ValueError: a training step logged twice (metrics.jsonl holds each step once; a resumed run drops the
            redone steps' lines), so the spend would be counted twice.
    """
    train = sorted(train_records(records), key=lambda r: int(r.get("step", 0)))
    steps = np.array([int(r.get("step", 0)) for r in train], dtype=np.int64)
    if steps.size != np.unique(steps).size:
        twice = sorted({int(s) for s in steps if (steps == s).sum() > 1})
        raise ValueError(f"training step(s) {twice[:5]} logged more than once: the spend would count twice")
    evals = {int(r.get("step", 0)): float(r["eval_accuracy"]) for r in eval_records(records)}
    eval_steps = np.array(sorted(evals), dtype=np.int64)
    upto = np.searchsorted(steps, eval_steps, side="right")  # training records with step <= s

    def cumulative(start: float, values: list[float]) -> np.ndarray:
        running = np.concatenate([[start], start + np.cumsum(np.asarray(values, dtype=np.float64))])
        return running[upto]

    return LearningCurve(
        step=eval_steps,
        accuracy=np.array([evals[s] for s in eval_steps.tolist()], dtype=np.float64),
        **{axis: cumulative(charged(records, axis), step_spend(train, axis)) for axis in AXES},
        rollouts_logged=all("rollouts_generated" in r for r in train),
        probe_rollouts=charged(records, "rollouts"),
    )


def final_accuracy(curve: LearningCurve) -> float:
    """Mean held-out pass@1 of the last two evaluations after step 0 (the one, if only one; NaN if none).

    Step 0 is the policy before RL, so it never enters a final accuracy.
    """
    after = curve.accuracy[curve.step > 0]
    return float(after[-2:].mean()) if after.size else math.nan


def area_under_curve(x: np.ndarray, y: np.ndarray, low: float, high: float) -> float:
    """Normalised area under a piecewise-linear curve: ``(1 / (high - low)) * integral_low^high y(x) dx``.

    Args:
        x: (E,) non-decreasing positions of the points (cumulative spend); y: (E,) values there (pass@1).
        low, high: the range; it must lie inside [x[0], x[-1]] (no extrapolation).

    Returns:
        The mean of y over [low, high] (pass@1 units); NaN when high <= low, the range is not covered or a
        value in it is NaN.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size == 0 or not (high > low) or low < x[0] or high > x[-1]:
        return math.nan
    inside = (x > low) & (x < high)
    xs = np.concatenate([[low], x[inside], [high]])
    ys = np.concatenate([[np.interp(low, x, y)], y[inside], [np.interp(high, x, y)]])
    area = float(np.sum(np.diff(xs) * (ys[1:] + ys[:-1]) / 2))
    return area / (high - low)


def first_crossing(x: np.ndarray, y: np.ndarray, target: float) -> float:
    """The first x at which the piecewise-linear curve reaches ``target`` (y >= target); NaN if it never does.

    With i the first point where y_i >= target: x_0 if i = 0, else
    ``x_{i-1} + (target - y_{i-1}) / (y_i - y_{i-1}) * (x_i - x_{i-1})`` (y_{i-1} < target <= y_i).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not math.isfinite(target):
        return math.nan
    hit = np.flatnonzero(y >= target)
    if hit.size == 0:
        return math.nan
    i = int(hit[0])
    if i == 0:
        return float(x[0])
    x0, x1, y0, y1 = x[i - 1], x[i], y[i - 1], y[i]
    return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))


def common_range(curves: Sequence[LearningCurve], axis: str = "rollouts") -> tuple[float, float]:
    """The range of ``axis`` that every curve covers: (max of the first points, min of the last points).

    Curves without an evaluation are left out; (NaN, NaN) when none is left.
    """
    xs = [c.axis(axis) for c in curves if c.step.size]
    if not xs:
        return math.nan, math.nan
    return max(float(x[0]) for x in xs), min(float(x[-1]) for x in xs)


@dataclass(frozen=True)
class Band:
    """Mean over seeds of curves interpolated on a grid, with the pointwise 95 % Student-t interval.

    Every array is (G,); NaN where a seed's curve does not cover the grid point (no extrapolation). ``low`` and
    ``high`` equal ``mean`` with one seed.
    """

    grid: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def band(curves: Sequence[LearningCurve], grid: np.ndarray, axis: str = "rollouts") -> Band:
    """Accuracy of each seed's curve at the grid points (linear interpolation between its evaluations, NaN
    outside its first..last evaluation), then per point the mean over seeds +- t_{0.975, S-1} s / sqrt(S).

    A grid point gets a value only where every seed covers it, so the mean never mixes different seed sets.
    """
    grid = np.asarray(grid, dtype=np.float64)
    rows = []
    for c in curves:
        x = c.axis(axis)
        if c.step.size == 0 or not np.isfinite(x).all():
            rows.append(np.full(grid.shape, np.nan))
            continue
        covered = (grid >= x[0]) & (grid <= x[-1])
        rows.append(np.where(covered, np.interp(grid, x, c.accuracy), np.nan))
    values = np.array(rows).reshape(len(rows), grid.size)
    mean = np.full(grid.shape, np.nan)
    half = np.full(grid.shape, np.nan)
    for j in range(grid.size):
        column = values[:, j]
        if column.size and np.isfinite(column).all():
            mean[j], half[j] = t_interval(column.tolist())
    half = np.where(np.isnan(half) & np.isfinite(mean), 0.0, half)  # one seed: the band is the line
    return Band(grid=grid, mean=mean, low=mean - half, high=mean + half, seeds=len(curves))


def run_cost(records: Sequence[Record]) -> dict[str, float]:
    """What a run generated: per step (mean over its training records) and in total (``_total``).

    Keys: ``steps``; ``rollouts_generated`` (each record's ``rollouts_generated``, else its ``budget_spent``),
    ``budget_spent`` (rollout-equivalents), ``tokens_generated``, ``tool_calls``, each with its ``_total`` (the
    RL steps only). A field some record lacks is left out (``rollouts_generated`` falls back instead);
    ``rollouts_generated_logged`` is 1.0 when every record logged it, else 0.0. What the run was charged before
    its first step (`charged`: the warm start's probe) is ``probe_rollouts``, ``probe_budget_spent``,
    ``probe_tokens_generated``, ``probe_tool_calls`` (0 without a charge, NaN where unknown).
    """
    train = train_records(records)
    out: dict[str, float] = {"steps": float(len(train))}
    if not train:
        return out
    for axis in AXES:
        out[f"probe_{AXIS_FIELDS[axis]}"] = charged(records, axis)
    out.update(step_means(train, [AXIS_FIELDS[axis] for axis in AXES], totals=True))
    out["rollouts_generated_logged"] = float(all("rollouts_generated" in r for r in train))
    return out


def curve_summaries(
    curves: Mapping[str, Sequence[LearningCurve]], baseline: str, axis: str = "rollouts"
) -> dict[str, list[dict[str, float]]]:
    """Per method, per seed (list index = seed): ``final_accuracy``, ``auc`` (over ``common_range`` of ALL the
    methods' runs), ``rollouts_to_baseline_final`` (first crossing of the baseline run of the same seed's final
    accuracy; NaN if not reached or that run is missing) and ``rollouts_to_baseline_final_share`` (divided by
    that baseline run's spend at its last evaluation); on another ``axis`` the last three are named by
    ``summary_keys(axis)``. Definitions in the module docstring.

    Raises:
        ValueError: ``baseline`` is not among the methods, or an unknown axis.
    """
    auc_key, reach_key, share_key = summary_keys(axis)
    cross_key, cross_share_key = crossing_keys(axis)
    if baseline not in curves:
        raise ValueError(f"baseline {baseline!r} is not among the methods {', '.join(curves)}")
    low, high = common_range([c for runs in curves.values() for c in runs], axis)
    base = list(curves[baseline])
    out: dict[str, list[dict[str, float]]] = {}
    for label, runs in curves.items():
        rows = []
        for seed, c in enumerate(runs):
            x = c.axis(axis)
            target = final_accuracy(base[seed]) if seed < len(base) else math.nan
            reach = first_crossing(x, c.accuracy, target) if c.step.size else math.nan
            base_x = base[seed].axis(axis) if seed < len(base) and base[seed].step.size else np.zeros(0)
            base_total = float(base_x[-1]) if base_x.size else math.nan
            # the baseline run's own first crossing of its final accuracy
            base_cross = first_crossing(base_x, base[seed].accuracy, target) if base_x.size else math.nan
            rows.append(
                {
                    "final_accuracy": final_accuracy(c),
                    auc_key: area_under_curve(x, c.accuracy, low, high),
                    reach_key: reach,
                    share_key: reach / base_total if base_total > 0 else math.nan,
                    cross_key: base_cross,
                    cross_share_key: reach / base_cross if base_cross > 0 else math.nan,
                }
            )
        out[label] = rows
    return out


def matched_finals(
    curves: Mapping[str, Sequence[LearningCurve]], baseline: str, axis: str = "rollout_equivalents"
) -> dict[str, list[dict[str, float]]]:
    """Per method, per seed: ``final_accuracy_at_baseline_spend``, the mean of the run's curve (interpolated) at
    the spends of the last two evaluations after step 0 of the same seed's baseline run (the spends its
    ``final_accuracy`` sits at), and ``final_spend_matched`` (1.0, or 0.0 with a NaN accuracy where the run's
    evaluations do not cover those spends, e.g. a dapo run that stopped short of them: flagged, not guessed).

    Raises:
        ValueError: ``baseline`` is not among the methods, or an unknown axis.
    """
    summary_keys(axis)
    if baseline not in curves:
        raise ValueError(f"baseline {baseline!r} is not among the methods {', '.join(curves)}")
    base = list(curves[baseline])
    out: dict[str, list[dict[str, float]]] = {}
    for label, runs in curves.items():
        rows = []
        for seed, c in enumerate(runs):
            value, matched = math.nan, 0.0
            b = base[seed] if seed < len(base) else None
            if b is not None and c.step.size and (b.step > 0).any():
                at = b.axis(axis)[b.step > 0][-2:]
                x = c.axis(axis)
                tol = 1e-9 * max(1.0, float(np.max(np.abs(at))))
                if np.isfinite(at).all() and np.isfinite(x).all() and x[0] <= at.min() + tol:
                    if x[-1] >= at.max() - tol:
                        value = float(np.mean(np.interp(at, x, c.accuracy)))
                        matched = 1.0
            rows.append({MATCHED_KEYS[0]: value, MATCHED_KEYS[1]: matched})
        out[label] = rows
    return out


def paired_interval(values: Sequence[float], baseline_values: Sequence[float]) -> tuple[float, float, int]:
    """Mean of the per-seed differences ``values[s] - baseline_values[s]`` with the half-width of its two-sided
    95 % Student-t interval (``summary.t_interval``), over the seeds where both are finite: (mean, half, n).
    half is NaN with fewer than two pairs; mean is NaN with none.
    """
    diffs = [
        float(a) - float(b)
        for a, b in zip(values, baseline_values, strict=False)
        if math.isfinite(float(a)) and math.isfinite(float(b))
    ]
    mean, half = t_interval(diffs)
    return mean, half, len(diffs)


def grid_for(curves: Sequence[LearningCurve], axis: str = "rollouts", points: int = 101) -> np.ndarray:
    """``points`` evenly spaced values from the smallest first to the largest last evaluation of ``axis`` over
    the curves (the band of each method is NaN beyond what all its seeds cover); empty if none has a finite one.

    Raises:
        ValueError: points < 2.
    """
    if points < 2:
        raise ValueError(f"a grid needs at least 2 points, got {points}")
    xs = [c.axis(axis) for c in curves if c.step.size and np.isfinite(c.axis(axis)).all()]
    if not xs:
        return np.zeros(0)
    return np.linspace(min(float(x[0]) for x in xs), max(float(x[-1]) for x in xs), points)


def _span(span: tuple[float, float]) -> dict[str, float | None]:
    return {"low": finite_or_none(span[0]), "high": finite_or_none(span[1])}


def _json_list(values: np.ndarray) -> list[float | None]:
    return [finite_or_none(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def curves_document(
    curves: Mapping[str, Sequence[LearningCurve]],
    baseline: str,
    *,
    axes: Sequence[str] = ("rollouts", "tokens"),
    points: int = 101,
) -> dict[str, Any]:
    """The content of a compare's curves.json (JSON-ready: NaN as None).

    ``methods[label]["seeds"]``: each seed's points (``step``, ``eval_accuracy`` and the cumulative spend on
    every axis of ``AXES``, which starts at the probe's charge for a method that reads the warm start's probe;
    ``probe_rollouts``: that charge); ``methods[label]["bands"][axis]``: ``band`` on the grid shared by all
    methods for that axis (``grid_for``); ``methods[label]["summary"]``: ``curve_summaries`` per seed on every
    axis of ``SUMMARY_AXES`` and ``matched_finals``; ``auc_range``: the common rollouts range of the AUC,
    ``auc_ranges``: the range per axis.
    """
    everything = [c for runs in curves.values() for c in runs]
    ranges = {axis: common_range(everything, axis) for axis in SUMMARY_AXES}
    summaries = {label: [dict[str, float]() for _ in runs] for label, runs in curves.items()}
    for axis in SUMMARY_AXES:
        for label, rows in curve_summaries(curves, baseline, axis).items():
            for merged, row in zip(summaries[label], rows, strict=True):
                merged.update(row)
    for label, rows in matched_finals(curves, baseline).items():
        for merged, row in zip(summaries[label], rows, strict=True):
            merged.update(row)
    grids = {axis: grid_for(everything, axis, points) for axis in axes}
    methods: dict[str, Any] = {}
    for label, runs in curves.items():
        bands = {}
        for axis in axes:
            b = band(runs, grids[axis], axis)
            bands[axis] = {
                "grid": _json_list(b.grid),
                "mean": _json_list(b.mean),
                "low": _json_list(b.low),
                "high": _json_list(b.high),
            }
        methods[label] = {
            "seeds": [
                {
                    "step": c.step.tolist(),
                    "eval_accuracy": _json_list(c.accuracy),
                    **{axis: _json_list(c.axis(axis)) for axis in AXES},
                    "rollouts_logged": c.rollouts_logged,
                    "probe_rollouts": finite_or_none(c.probe_rollouts),
                }
                for c in runs
            ],
            "bands": bands,
            "summary": [{k: finite_or_none(v) for k, v in row.items()} for row in summaries[label]],
        }
    return {
        "baseline": baseline,
        "auc_range": {"axis": "rollouts", **_span(ranges["rollouts"])},
        "auc_ranges": {axis: _span(span) for axis, span in ranges.items()},
        "interpolation": "linear between consecutive evaluations, no extrapolation; band: pointwise mean over "
        "seeds +- 95 % Student-t half-width, only where every seed covers the point",
        "methods": methods,
    }
