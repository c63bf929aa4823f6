"""HTML dashboard of a run folder or a compare folder, read from the logs only.

    write_report(DIR) -> DIR/report.html   (and the plots as PNG files under DIR/report/)

A run folder holds metrics.jsonl (and config.json, sft/sft.json); a compare folder holds comparison.json and one
run folder per method and seed (DIR/<method>/seed_<k>/metrics.jsonl). The page opens with a summary panel (the
headline numbers with units: trace_rl.metrics.summary), then a grid of plots; for a compare folder, a table of
the methods side by side with 95 % intervals over seeds, the learning-curve tables (final pass@1, AUC, spend to
the baseline's final pass@1, paired intervals: trace_rl.metrics.curves) and the cost as generated, an interval
plot, and curves as the mean over seeds with their min-max band; held-out pass@1 against cumulative generated
rollouts, rollout-equivalents and tokens with a 95 % t-band. It is self-contained: the plots are embedded as data
URIs, nothing is fetched.

This module only puts the page together: the folder is read by trace_rl.metrics.run_logs, the figures drawn by
trace_rl.metrics.plots and the HTML written by trace_rl.metrics.report_html. ``prefix_stage_stats``,
``flip_rates_by_depth`` and ``depth_stats`` (trace_rl.metrics.prefix_stage) still import from here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trace_rl.metrics.plots import (
    AXIS_LABELS,
    calibration_plot,
    depth_plot,
    flip_plot,
    interval_plot,
    learning_curve_plot,
    line_plot,
    time_plot,
    warm_start_plot,
)
from trace_rl.metrics.prefix_stage import depth_stats, flip_rates_by_depth, prefix_stage_stats
from trace_rl.metrics.report_html import (
    cards,
    compare_table,
    cost_table,
    curve_table,
    last_step_table,
    page,
    time_bar,
    time_table,
)
from trace_rl.metrics.run_logs import Runs, config_of, learning_curves, pooled_records, runs_of, sft_of
from trace_rl.metrics.summary import (
    TIME_KEYS,
    eval_decoding,
    fmt_number,
    run_headline,
    run_title,
    time_shares,
    train_records,
)

__all__ = ["TIME_KEYS", "depth_stats", "flip_rates_by_depth", "prefix_stage_stats", "write_report"]


def _eval_title(runs: Runs) -> str:
    """Held-out pass@1, saying how it was decoded (greedy, or samples per task at a temperature)."""
    decoding = next((d for seeds in runs.values() for recs in seeds if (d := eval_decoding(recs))), "greedy")
    return f"Held-out pass@1 ({decoding})"


def write_report(folder: str | Path) -> Path:
    """Write folder/report.html (and PNGs under folder/report/) from the logs; returns the HTML path.

    Raises:
        ValueError: the folder has no metrics.jsonl and no comparison.json.
    """
    root = Path(folder)
    runs, comparison = runs_of(root)
    img = root / "report"
    img.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []
    if comparison is not None and interval_plot(img / "intervals.png", comparison):
        figures.append(("intervals.png", "Methods side by side: per-seed values, mean and 95 % interval"))
    plots = [
        (
            "effective_ratio.png",
            "Effective ratio (share of active prompts whose tree is mixed)",
            "effective_ratio",
            "train",
        ),
        ("eval_accuracy.png", _eval_title(runs), "eval_accuracy", "eval"),
        ("success_rate.png", "Success rate of root rollouts", "success_rate", "train"),
        ("skip_rate.png", "Skip rate (candidate prompts given no rollouts)", "skip_rate", "train"),
        (
            "rollouts_per_prompt.png",
            "Rollouts per active prompt (roots + replays)",
            "rollouts_per_active_prompt",
            "train",
        ),
        ("budget_spent.png", "Budget spent (rollout-equivalents)", "budget_spent", "train"),
        (
            "predictor_mse.png",
            "Predictor MSE on the step's new nodes (before training on them)",
            "predictor_mse",
            "train",
        ),
    ]
    curves = learning_curves(runs)
    for axis, name in (
        ("rollouts", "accuracy_vs_rollouts.png"),
        ("rollout_equivalents", "accuracy_vs_rollout_eq.png"),
        ("tokens", "accuracy_vs_tokens.png"),
    ):
        same = all(np.array_equal(c.rollouts, c.rollout_equivalents) for cs in curves.values() for c in cs)
        if axis == "rollout_equivalents" and same:
            continue  # flat methods only: the rollouts plot is this one
        title = f"{_eval_title(runs)} vs {AXIS_LABELS[axis].split(' (')[0]}"
        if learning_curve_plot(img / name, title, curves, axis):
            figures.append((name, title))
    for name, title, key, kind in plots:
        if line_plot(img / name, title, runs, key, kind):
            figures.append((name, title))
    if depth_plot(img / "replay_depths.png", runs):
        figures.append(("replay_depths.png", "Replay depth histogram"))
    if flip_plot(img / "replay_flips.png", runs):
        figures.append(("replay_flips.png", "Replay flip rate by anchor depth"))
    if time_plot(img / "wall_clock.png", runs):
        figures.append(("wall_clock.png", "Wall-clock breakdown"))
    if calibration_plot(img / "predictor_depth_calibration.png", runs):
        figures.append(("predictor_depth_calibration.png", "Predictor error by depth and calibration"))
    sft = sft_of(root)
    if sft is not None and warm_start_plot(img / "warm_start.png", sft):
        figures.insert(0, ("warm_start.png", "Warm start (SFT on gold trajectories) before RL"))

    if comparison is not None:
        title = f"trace-rl comparison: {root.name}"
        budget = comparison.get("budget_total")
        seeds = max((len(s) for s in runs.values()), default=0)
        sub = (
            f"preset {comparison.get('preset', '?')} · {len(runs)} methods at equal budget "
            f"({fmt_number(budget) if isinstance(budget, int | float) else '?'} rollout-eq. per step) · "
            f"{seeds} seeds each"
        )
        summary = "<h2>Methods at equal budget</h2>" + compare_table(comparison)
        summary += curve_table(curves) + curve_table(curves, "rollout_equivalents") + cost_table(runs)
        shares = {label: time_shares(train_records(recs)) for label, recs in pooled_records(runs).items()}
        if any(shares.values()):
            summary += time_table({label: share for label, share in shares.items() if share})
        details = ""
    else:
        recs = next(iter(runs.values()))[0]
        config = config_of(root)
        title = f"trace-rl report: {root.name}"
        sub = run_title(recs, config)
        summary = "<h2>Summary</h2>" + cards(run_headline(recs, config, sft))
        share = time_shares(train_records(recs))
        if share:
            summary += time_bar("share of the step wall-clock (summed over steps)", share)
        details = last_step_table(train_records(recs))
    out = root / "report.html"
    out.write_text(page(title, sub, summary, img, figures, details), encoding="utf-8")
    return out
