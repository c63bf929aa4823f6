"""The report's plots: one matplotlib figure per function, saved as a PNG; each returns whether it drew anything.

    line_plot, depth_plot, flip_plot, time_plot, calibration_plot, learning_curve_plot, interval_plot,
    warm_start_plot   (path, ...) -> True when the figure was saved to path

Curves are the mean over seeds with their min-max band; learning curves the mean with a 95 % t-band
(trace_rl.metrics.curves.band). matplotlib is imported on the first plot (Agg backend), never at import time.
Used by trace_rl.metrics.report.write_report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.metrics.curves import LearningCurve, band, common_range, grid_for
from trace_rl.metrics.prefix_stage import flip_rates_by_depth
from trace_rl.metrics.run_logs import COMPARE_METRICS, Records, Runs, pooled_records, seed_values
from trace_rl.metrics.summary import TIME_COLOURS, TIME_NAMES, t_interval, time_shares, train_records


def _series(
    records: Sequence[dict[str, Any]], key: str, kind: str = "train"
) -> tuple[np.ndarray, np.ndarray]:
    rows = [r for r in records if r.get("kind", "train") == kind and isinstance(r.get(key), int | float)]
    return np.array([r["step"] for r in rows], dtype=float), np.array([float(r[key]) for r in rows])


def _over_seeds(
    seeds: Sequence[Records], key: str, kind: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, and per step the mean, min and max of ``key`` over the seeds that logged it."""
    by_step: dict[float, list[float]] = {}
    for recs in seeds:
        x, y = _series(recs, key, kind)
        for step, value in zip(x.tolist(), y.tolist(), strict=True):
            by_step.setdefault(step, []).append(value)
    steps = np.array(sorted(by_step))
    vals = [np.asarray(by_step[s]) for s in steps.tolist()]
    return (
        steps,
        np.array([v.mean() for v in vals]),
        np.array([v.min() for v in vals]),
        np.array([v.max() for v in vals]),
    )


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["axes.formatter.useoffset"] = False  # plain tick labels, never "1e-7 + 4.206e-2"
    return plt


def _finish(plt: Any, fig: Any, path: Path, drawn: bool) -> bool:
    """Save and close a figure when something was drawn on it; report whether it was saved."""
    if drawn:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def line_plot(path: Path, title: str, runs: Runs, key: str, kind: str = "train") -> bool:
    """One curve per method: the mean over seeds, with the min-max band when there are several seeds."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for label, seeds in runs.items():
        x, y, lo, hi = _over_seeds(seeds, key, kind)
        if x.size:
            n = sum(1 for recs in seeds if _series(recs, key, kind)[0].size)
            name = f"{label} (mean of {n} seeds, band min-max)" if n > 1 else label
            (line,) = ax.plot(x, y, marker="o", ms=3, label=name)
            if n > 1:
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
            drawn = True
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def depth_plot(path: Path, runs: Runs) -> bool:
    """Per method, the share of replays at each prefix depth (``replay_depths`` summed over steps and seeds)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    pooled = pooled_records(runs)
    width = 0.8 / max(len(pooled), 1)
    drawn = False
    for j, (label, recs) in enumerate(pooled.items()):
        hists = [np.asarray(r.get("replay_depths") or [], dtype=float) for r in train_records(recs)]
        hists = [h for h in hists if h.size]
        if not hists:
            continue
        size = max(h.size for h in hists)
        total = np.sum([np.pad(h, (0, size - h.size)) for h in hists], axis=0)
        if total.sum() == 0:
            continue
        ax.bar(np.arange(size) + j * width, total / total.sum(), width=width, label=label)
        drawn = True
    ax.set_title("Replay depth (turns in the prefix), share of replays", fontsize=10)
    ax.set_xlabel("prefix depth")
    ax.set_ylabel("share")
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def flip_plot(path: Path, runs: Runs) -> bool:
    """Replay flip rate by anchor depth per method (bars), next to the fresh-rollout flip rate of the same
    prompts (black ticks)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    pooled = {label: flip_rates_by_depth(recs) for label, recs in pooled_records(runs).items()}
    pooled = {label: rates for label, rates in pooled.items() if rates}
    width = 0.8 / max(len(pooled), 1)
    for j, (label, rates) in enumerate(pooled.items()):
        x = np.array(list(rates), dtype=float) + j * width
        ax.bar(x, [v[0] for v in rates.values()], width=width, label=label)
        ax.scatter(x, [v[1] for v in rates.values()], marker="_", s=120, color="black", zorder=3)
    drawn = bool(pooled)
    ax.set_title("Replay flip rate by anchor depth (black: fresh rollouts of the same prompts)", fontsize=10)
    ax.set_xlabel("anchor depth (turns in the prefix)")
    ax.set_ylabel("share of replays that flip")
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def time_plot(path: Path, runs: Runs) -> bool:
    """Per method, a stacked bar of the step wall-clock shares (`trace_rl.metrics.summary.time_shares`)."""
    plt = _plt()
    labels, shares = [], []
    for label, recs in pooled_records(runs).items():
        share = time_shares(train_records(recs))
        if share:
            labels.append(label)
            shares.append(share)
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.5 * len(labels) + 1.5))
    left = np.zeros(len(labels))
    for name, colour in zip(TIME_NAMES, TIME_COLOURS, strict=True):
        vals = np.array([s[name] for s in shares])
        ax.barh(labels, vals, left=left, label=name, color=colour)
        left += vals
    ax.set_xlabel("share of wall-clock")
    ax.set_title("Wall-clock breakdown per step", fontsize=10)
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    return _finish(plt, fig, path, True)


def calibration_plot(path: Path, runs: Runs) -> bool:
    """Predictor error by depth (last logged step with depth metrics) and calibration error over steps."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(6.4, 3.6))
    drawn = False
    for label, seeds in runs.items():
        recs = seeds[0] if seeds else []
        depth_rows = [r for r in train_records(recs) if any(k.startswith("predictor_mse_depth_") for k in r)]
        if depth_rows:
            last = depth_rows[-1]
            depths = sorted(int(k.rsplit("_", 1)[1]) for k in last if k.startswith("predictor_mse_depth_"))
            ax1.plot(depths, [last[f"predictor_mse_depth_{d}"] for d in depths], marker="o", label=label)
            drawn = True
        x, y = _series(recs, "predictor_ece")
        if x.size:
            ax2.plot(x, y, marker="o", ms=3, label=label)
            drawn = True
    ax1.set_title("Predictor MSE by depth (last step)", fontsize=9)
    ax1.set_xlabel("depth (0 = prompt)")
    ax2.set_title("Predictor calibration error (ECE)", fontsize=9)
    ax2.set_xlabel("step")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


AXIS_LABELS = {
    "rollouts": "generated rollouts (cumulative, discarded ones included)",
    "rollout_equivalents": "rollout-equivalents (cumulative budget_spent)",
    "tokens": "generated tokens (cumulative)",
}


def learning_curve_plot(
    path: Path, title: str, curves: Mapping[str, Sequence[LearningCurve]], axis: str
) -> bool:
    """Held-out pass@1 against the cumulative spend on ``axis``: per method the mean over seeds on a shared grid
    with its pointwise 95 % t-band, and each seed's evaluations as faint points; on the rollouts and
    rollout-equivalents axes a dotted line where the range every run covers (the AUC's) ends."""
    everything = [c for seeds in curves.values() for c in seeds]
    grid = grid_for(everything, axis)
    if grid.size == 0:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for label, seeds in curves.items():
        b = band(seeds, grid, axis)
        if not np.isfinite(b.mean).any():
            continue
        name = f"{label} (mean of {b.seeds} seeds, 95 % band)" if b.seeds > 1 else label
        (line,) = ax.plot(b.grid, b.mean, label=name)
        if b.seeds > 1:
            ax.fill_between(b.grid, b.low, b.high, color=line.get_color(), alpha=0.18, linewidth=0)
        for c in seeds:
            ax.scatter(c.axis(axis), c.accuracy, s=8, color=line.get_color(), alpha=0.45, linewidths=0)
        drawn = True
    if axis in ("rollouts", "rollout_equivalents") and len(everything) > 1:  # a comparison's AUC range
        high = common_range(everything, axis)[1]
        if np.isfinite(high):
            ax.axvline(
                high, color="0.4", linestyle=":", linewidth=1, label="AUC range ends (every run covers it)"
            )
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(AXIS_LABELS.get(axis, axis))
    ax.set_ylabel("held-out pass@1")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def interval_plot(path: Path, comparison: Mapping[str, Any]) -> bool:
    """Per metric, the methods side by side: each seed's value, the mean and its 95 % t-interval."""
    methods = list(comparison["methods"])
    panels = [(k, label) for k, label, _ in COMPARE_METRICS if k != "budget_spent"]
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(12.8, 3.3))
    drawn = False
    for ax, (key, label) in zip(axes, panels, strict=True):
        for i, method in enumerate(methods):
            vals = seed_values(comparison["methods"][method], key)
            if not vals:
                continue
            mu, half = t_interval(vals)
            jitter = np.linspace(-0.12, 0.12, len(vals)) if len(vals) > 1 else np.zeros(1)
            ax.scatter(i + jitter, vals, s=14, color="0.55", zorder=2)
            ax.errorbar(
                [i], [mu], yerr=None if np.isnan(half) else [[half], [half]], fmt="o", color=f"C{i}",
                capsize=6, ms=7, zorder=3,
            )  # fmt: skip
            drawn = True
        ax.set_xticks(range(len(methods)), methods, rotation=30 if len(methods) > 3 else 0)
        ax.set_xlim(-0.6, len(methods) - 0.4)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Methods at equal budget: seeds (grey), mean and 95 % t-interval", fontsize=10)
    return _finish(plt, fig, path, drawn)


def warm_start_plot(path: Path, sft: dict[str, Any]) -> bool:
    """SFT loss curve and the probe's sampled success / mixed share at its evaluation points."""
    curve = np.asarray(sft.get("loss_curve") or [], dtype=float).reshape(-1, 2)
    history = [h for h in sft.get("history", []) if "mean_success" in h]
    if curve.size == 0 and not history:
        return False
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    if curve.size:
        ax1.plot(curve[:, 0], curve[:, 1])
    ax1.set(xlabel="SFT step", ylabel="loss (nats/token, EMA)", title="SFT loss")
    if history:
        steps = [h["step"] for h in history]
        ax2.plot(steps, [h["mean_success"] for h in history], marker="o", label="mean success")
        ax2.plot(steps, [h.get("mixed_share", np.nan) for h in history], marker="s", label="mixed share")
        ax2.legend()
    ax2.set(xlabel="SFT step", ylabel="share", ylim=(0, 1), title="Probe prompts, 8 samples at T=1")
    return _finish(plt, fig, path, True)
