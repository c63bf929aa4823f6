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
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.errors import UserError
from trace_rl.metrics.curves import (
    LearningCurve,
    band,
    common_range,
    crossing_keys,
    curve_summaries,
    grid_for,
    learning_curve,
    paired_interval,
    run_cost,
    summary_keys,
)
from trace_rl.metrics.summary import (
    TIME_KEYS,
    TIME_PARTS,
    Headline,
    eval_decoding,
    fmt_mean,
    fmt_number,
    fmt_points,
    fmt_seconds,
    fmt_share,
    format_field,
    run_headline,
    run_title,
    t_interval,
    time_shares,
    train_records,
)

__all__ = ["TIME_KEYS", "depth_stats", "flip_rates_by_depth", "prefix_stage_stats", "write_report"]

Records = list[dict[str, Any]]
Runs = dict[str, list[Records]]  # label -> one record list per seed


def _records(path: Path) -> Records:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


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


def _line_plot(path: Path, title: str, runs: Runs, key: str, kind: str = "train") -> bool:
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


def _pooled(runs: Runs) -> dict[str, Records]:
    """Every seed's records of a method in one list (for histograms and sums over steps)."""
    return {label: [r for recs in seeds for r in recs] for label, seeds in runs.items()}


def _depth_plot(path: Path, runs: Runs) -> bool:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    pooled = _pooled(runs)
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


def flip_rates_by_depth(records: Sequence[Mapping[str, Any]]) -> dict[int, tuple[float, float, int]]:
    """Replay and fresh-rollout flip rates per anchor depth, pooled over steps: depth -> (replay rate, fresh rate,
    replays). Each step's rates are weighted by its replays at that depth (``replay_depths``), so the pooled
    rate is the share over all replays, as if all steps were one."""
    sums: dict[int, list[float]] = {}
    for r in train_records(records):
        counts = r.get("replay_depths") or []
        for d, n in enumerate(counts):
            rate, fresh = r.get(f"replay_flip_rate_depth_{d}"), r.get(f"fresh_flip_rate_depth_{d}")
            if n and isinstance(rate, int | float) and np.isfinite(rate):
                acc = sums.setdefault(d, [0.0, 0.0, 0.0, 0.0])
                acc[0] += n * float(rate)
                acc[2] += n
                if isinstance(fresh, int | float) and np.isfinite(fresh):
                    acc[1] += n * float(fresh)
                    acc[3] += n
    return {
        d: (a[0] / a[2], a[1] / a[3] if a[3] else float("nan"), int(a[2])) for d, a in sorted(sums.items())
    }


def prefix_stage_stats(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What one run's prefix stage bought, summed over its training steps (issue 23's report).

    Returns a dict with
        ``mixed_sibling_share``: mean over steps of the step record's share of mixed sibling groups (the trees
            trained on; NaN where no step had a sibling group);
        ``replays``, ``replay_flips``: replays generated and how many flipped the ending of their anchor's rollout;
        ``replay_flip_rate``: replay_flips / replays (NaN without replays);
        ``flips_per_1k_tokens``: replay_flips per 1,000 model tokens generated by the whole run (roots included):
            what a flip cost in the run's own compute;
        ``by_depth``: anchor depth d -> {"replays", "flips", "tokens" (model tokens the replays from depth d
            sampled; NaN where a step of the log has no ``replay_tokens_depth_<d>``, i.e. logs before 4dae319),
            "flip_rate" (flips / replays), "flips_per_1k_tokens" (1,000 flips / tokens)}.
    Flip counts come from ``replay_flips_depth_<d>`` where logged, else from the step's rate times its replay
    count at d (``replay_depths``), which is the same number.
    """
    train = train_records(records)
    depth: dict[int, list[float]] = {}  # d -> [replays, flips, tokens, steps without a token count]
    tokens_total = 0.0
    shares = []
    for r in train:
        tokens_total += float(r.get("tokens_generated") or 0.0)
        share = r.get("mixed_sibling_share")
        if isinstance(share, int | float) and np.isfinite(share):
            shares.append(float(share))
        for d, n in enumerate(r.get("replay_depths") or []):
            if not n:
                continue
            flips = r.get(f"replay_flips_depth_{d}")
            if flips is None:
                rate = r.get(f"replay_flip_rate_depth_{d}")
                flips = round(n * float(rate)) if isinstance(rate, int | float) and np.isfinite(rate) else 0
            acc = depth.setdefault(d, [0.0, 0.0, 0.0, 0.0])
            acc[0] += n
            acc[1] += float(flips)
            tok = r.get(f"replay_tokens_depth_{d}")
            if isinstance(tok, int | float):
                acc[2] += float(tok)
            else:
                acc[3] += 1
    replays = sum(a[0] for a in depth.values())
    flips = sum(a[1] for a in depth.values())
    nan = float("nan")
    return {
        "mixed_sibling_share": float(np.mean(shares)) if shares else nan,
        "replays": replays,
        "replay_flips": flips,
        "replay_flip_rate": flips / replays if replays else nan,
        "flips_per_1k_tokens": 1000.0 * flips / tokens_total if tokens_total else nan,
        "by_depth": {d: depth_stats(a[0], a[1], a[2] if not a[3] else nan) for d, a in sorted(depth.items())},
    }


def depth_stats(replays: float, flips: float, tokens: float) -> dict[str, float]:
    """One depth's entry of `prefix_stage_stats`' ``by_depth`` (also for sums over seeds)."""
    return {
        "replays": replays,
        "flips": flips,
        "tokens": tokens,
        "flip_rate": flips / replays if replays else float("nan"),
        "flips_per_1k_tokens": 1000.0 * flips / tokens if tokens > 0 else float("nan"),
    }


def _flip_plot(path: Path, runs: Runs) -> bool:
    """Replay flip rate by anchor depth per method (bars), next to the fresh-rollout flip rate of the same
    prompts (black ticks)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    pooled = {label: flip_rates_by_depth(recs) for label, recs in _pooled(runs).items()}
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


def _time_plot(path: Path, runs: Runs) -> bool:
    plt = _plt()
    labels, shares = [], []
    for label, recs in _pooled(runs).items():
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


def _calibration_plot(path: Path, runs: Runs) -> bool:
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


def _curves(runs: Runs) -> dict[str, list[LearningCurve]]:
    """Every run's learning curve (trace_rl.metrics.curves.learning_curve).

    Raises:
        ValueError: a run's log counts a step twice; the message names the method and seed.
    """
    out: dict[str, list[LearningCurve]] = {}
    for label, seeds in runs.items():
        out[label] = []
        for k, recs in enumerate(seeds):
            try:
                out[label].append(learning_curve(recs))
            except ValueError as err:
                raise UserError(f"{label} seed {k} (its metrics.jsonl): {err}") from err
    return out


def _learning_curve_plot(
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


# The compare table and interval plot: (key in comparison.json's per-seed summaries, label, is a share).
COMPARE_METRICS = (
    ("effective_ratio", "Effective ratio", True),
    ("success_rate", "Success rate", True),
    ("eval_accuracy", "Held-out pass@1 (last)", True),
    ("skip_rate", "Skip rate", True),
    ("budget_spent", "Budget spent / step", False),
    ("wall_s", "Wall-clock / step", False),
)


def _seed_values(row: Mapping[str, Any], key: str) -> list[float]:
    """Per-seed values of a metric in a comparison.json row (its 'runs'); the mean alone if they are absent."""
    runs = row.get("runs")
    if isinstance(runs, list) and runs:
        return [float(r[key]) for r in runs if isinstance(r, dict) and isinstance(r.get(key), int | float)]
    return [float(row[key])] if isinstance(row.get(key), int | float) else []


def _interval_plot(path: Path, comparison: Mapping[str, Any]) -> bool:
    """Per metric, the methods side by side: each seed's value, the mean and its 95 % t-interval."""
    methods = list(comparison["methods"])
    panels = [(k, label) for k, label, _ in COMPARE_METRICS if k != "budget_spent"]
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(12.8, 3.3))
    drawn = False
    for ax, (key, label) in zip(axes, panels, strict=True):
        for i, method in enumerate(methods):
            vals = _seed_values(comparison["methods"][method], key)
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


def _runs_of(folder: Path) -> tuple[Runs, dict[str, Any] | None]:
    comparison = folder / "comparison.json"
    if comparison.exists():
        data = json.loads(comparison.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
            raise UserError(f"{comparison} has no 'methods' table: not written by trace-rl compare")
        runs: Runs = {}
        for method in data.get("methods", {}):
            seeds = sorted((folder / method).glob("seed_*"), key=lambda p: (len(p.name), p.name))
            runs[method] = [_records(s / "metrics.jsonl") for s in seeds] or [[]]
        return runs, data
    recs = _records(folder / "metrics.jsonl")
    if not recs:
        if (folder / "metrics.jsonl").exists():
            raise UserError(f"{folder}/metrics.jsonl holds no readable record")
        raise UserError(f"{folder} holds neither metrics.jsonl nor comparison.json")
    method = next((r.get("method") for r in recs if r.get("method")), "run")
    return {str(method): [recs]}, None


def _eval_title(runs: Runs) -> str:
    """Held-out pass@1, saying how it was decoded (greedy, or samples per task at a temperature)."""
    decoding = next((d for seeds in runs.values() for recs in seeds if (d := eval_decoding(recs))), "greedy")
    return f"Held-out pass@1 ({decoding})"


def _warm_start_plot(path: Path, sft: dict[str, Any]) -> bool:
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


# ------------------------------------------------------------------------------------------------------- HTML
STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --card: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif; color: var(--ink); }
main { max-width: 1240px; margin: 0 auto; padding: 18px 20px 40px; }
h1 { font-size: 22px; margin: 0 0 2px; } h2 { font-size: 17px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 12px; }
.cards { display: grid; grid-template-columns: repeat(4, minmax(0, 1fr)); gap: 10px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .03em; }
.card .value { font-size: 22px; font-weight: 700; font-variant-numeric: tabular-nums; margin: 2px 0; }
.card .detail { color: var(--muted); font-size: 12.5px; }
.timebar { display: flex; height: 22px; border-radius: 5px; overflow: hidden; margin: 6px 0 4px; }
.timebar div { height: 100%; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 16px; color: var(--muted); font-size: 12.5px;
  font-variant-numeric: tabular-nums; }
i.key { display: inline-block; width: 9px; height: 9px; border-radius: 2px; margin-right: 4px; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 14px; }
figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 8px; background: #fff; }
figure.wide { grid-column: 1 / -1; }
figure img { width: 100%; height: auto; display: block; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; display: block; max-width: 100%; overflow-x: auto; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { white-space: normal; }
th:first-child, td:first-child { text-align: left; }
th { color: var(--muted); font-weight: 600; font-size: 12.5px; }
td .pm { color: var(--muted); font-size: 12px; }
td.best { font-weight: 700; }
details { margin-top: 22px; } summary { cursor: pointer; font-weight: 600; }
details table { margin-top: 8px; font-size: 12.5px; }
"""
TIME_NAMES = (*TIME_PARTS, "other")
TIME_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")  # as in wall_clock.png


def _e(text: object) -> str:
    return html.escape(str(text))


def _cards(items: Sequence[Headline]) -> str:
    tiles = [
        f"<div class='card' data-role='headline'><div class='label'>{_e(h.label)}</div>"
        f"<div class='value'>{_e(h.value)}</div><div class='detail'>{_e(h.detail)}</div></div>"
        for h in items
    ]
    return "<div class='cards'>" + "".join(tiles) + "</div>"


def _segments(shares: Mapping[str, float]) -> str:
    return "".join(
        f"<div style='width:{100 * shares[n]:.2f}%;background:{c}' title='{n} {fmt_share(shares[n])}'></div>"
        for n, c in zip(TIME_NAMES, TIME_COLOURS, strict=True)
    )


def _time_bar(label: str, shares: Mapping[str, float]) -> str:
    """One run: a stacked bar of the wall-clock shares with a legend that gives each share."""
    legend = "".join(
        f"<span><i style='background:{c}'></i>{n} {fmt_share(shares[n])}</span>"
        for n, c in zip(TIME_NAMES, TIME_COLOURS, strict=True)
    )
    return (
        f"<div data-role='time-shares'><div class='sub' style='margin:8px 0 0'>{_e(label)}</div>"
        f"<div class='timebar'>{_segments(shares)}</div><div class='legend'>{legend}</div></div>"
    )


def _time_table(shares: Mapping[str, Mapping[str, float]]) -> str:
    """Several methods: one row each, the shares as numbers and as a stacked bar."""
    head = "".join(
        f"<th><i class='key' style='background:{c}'></i>{n}</th>"
        for n, c in zip(TIME_NAMES, TIME_COLOURS, strict=True)
    )
    rows = "".join(
        f"<tr><td>{_e(label)}</td>"
        + "".join(f"<td>{fmt_share(share[n])}</td>" for n in TIME_NAMES)
        + f"<td style='width:40%'><div class='timebar' style='margin:0'>{_segments(share)}</div></td></tr>"
        for label, share in shares.items()
    )
    return (
        "<h2>Where the wall-clock went (share of the summed step time, all seeds)</h2>"
        f"<table data-role='time-shares'><tr><th>method</th>{head}<th></th></tr>{rows}</table>"
    )


def _image(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _figures(img: Path, figures: Sequence[tuple[str, str]]) -> str:
    wide = {"intervals.png", "warm_start.png"}
    out = []
    for name, caption in figures:
        cls = "wide" if name in wide else ""
        out.append(
            f"<figure class='{cls}' data-file='report/{_e(name)}'><img src='{_image(img / name)}' "
            f"alt='{_e(caption)}' title='{_e(caption)}'></figure>"
        )
    return "<div class='grid'>" + "".join(out) + "</div>"


def _last_step_table(train: Sequence[Mapping[str, Any]]) -> str:
    if not train:
        return ""
    last = train[-1]
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(format_field(k, v))}</td></tr>"
        for k, v in last.items()
        if isinstance(v, int | float | str | list) or v is None
    )
    return (
        f"<details><summary>Last step ({_e(last.get('step', ''))}): every logged field</summary>"
        f"<table>{rows}</table></details>"
    )


def _cell(values: Sequence[float], share: bool, seconds: bool) -> tuple[str, float]:
    mu, half = t_interval(values)
    fmt = fmt_share if share else (fmt_seconds if seconds else fmt_number)
    text = _e(fmt(mu))
    if not np.isnan(half):
        text += f" <span class='pm'>± {_e(fmt_points(half)[1:] if share else fmt(half))}</span>"
    return text, mu


def _compare_table(comparison: Mapping[str, Any]) -> str:
    methods = comparison["methods"]
    baseline = "grpo" if "grpo" in methods else next(iter(methods))
    base_eff = t_interval(_seed_values(methods[baseline], "effective_ratio"))[0]
    head = "<tr><th>method</th><th>seeds</th>" + "".join(
        f"<th>{_e(lab)}</th>" for _, lab, _ in COMPARE_METRICS
    )
    head += f"<th>effective ratio vs {_e(baseline)}</th><th>held-out first → last</th></tr>"
    cells: dict[str, list[tuple[str, float]]] = {}
    for method, row in methods.items():
        cells[method] = [
            _cell(_seed_values(row, key), share, key == "wall_s") for key, _, share in COMPARE_METRICS
        ]
    best = {}
    for j, (key, _, _) in enumerate(COMPARE_METRICS):
        if key in ("effective_ratio", "eval_accuracy", "success_rate"):
            vals = [cells[m][j][1] for m in methods]
            if any(not np.isnan(v) for v in vals):
                best[j] = float(np.nanmax(vals))
    body = []
    for method, row in methods.items():
        tds = "".join(
            f"<td class='{'best' if j in best and mu == best[j] and len(methods) > 1 else ''}'>{text}</td>"
            for j, (text, mu) in enumerate(cells[method])
        )
        eff = cells[method][0][1]
        delta = "baseline" if method == baseline else fmt_points(eff - base_eff)
        first = t_interval(_seed_values(row, "eval_accuracy_first"))[0]
        last = cells[method][2][1]
        held = (
            f"{fmt_share(first)} → {fmt_share(last)} ({fmt_points(last - first)})"
            if not np.isnan(first)
            else "–"
        )
        seeds = row.get("seeds", len(_seed_values(row, "effective_ratio")))
        body.append(
            f"<tr data-method='{_e(method)}'><td>{_e(method)}</td><td>{_e(seeds)}</td>{tds}"
            f"<td>{_e(delta)}</td><td>{_e(held)}</td></tr>"
        )
    note = (
        "Mean over seeds ± half-width of the 95 % Student-t interval of the mean (per-seed values: each run's "
        "mean over its steps; held-out pass@1 at the last evaluation). Best of a column in bold."
    )
    return f"<table data-role='compare-table'>{head}{''.join(body)}</table><p class='sub'>{_e(note)}</p>"


def _signed(x: float) -> str:
    return ("+" if x >= 0 else "") + fmt_mean(round(x, 1))


def _count_cell(values: Sequence[float]) -> str:
    """Mean over seeds of a count (rollouts, tokens, tool calls) ± its 95 % t half-width, at one decimal
    (rounded first, so float noise never prints as '480.0')."""
    mu, half = t_interval(values)
    text = _e(fmt_mean(round(mu, 1) if np.isfinite(mu) else mu))
    return text + (f" <span class='pm'>± {_e(fmt_mean(round(half, 1)))}</span>" if not np.isnan(half) else "")


def _paired_cell(values: Sequence[float], base: Sequence[float], share: bool) -> str:
    """Mean per-seed difference against the baseline and its 95 % paired t-interval: '+3.1 [+0.5, +5.7] pts'."""
    mu, half, n = paired_interval(values, base)
    if n == 0:
        return "–"
    fmt = (lambda x: f"{100 * x:+.1f}") if share else _signed
    unit = " pts" if share else ""
    if np.isnan(half):
        return _e(f"{fmt(mu)}{unit} (1 seed)")
    return _e(f"{fmt(mu)} [{fmt(mu - half)}, {fmt(mu + half)}]{unit}") + (
        f" <span class='pm'>{n} seeds</span>" if n < min(len(values), len(base)) else ""
    )


COST_COLUMNS = (  # (key of run_cost, header)
    ("steps", "steps"),
    ("rollouts_generated", "generated rollouts / step"),
    ("rollouts_generated_total", "generated rollouts, total"),
    ("budget_spent", "rollout-eq. / step"),
    ("budget_spent_total", "rollout-eq., total"),
    ("tokens_generated", "tokens / step"),
    ("tokens_generated_total", "tokens, total"),
    ("tool_calls", "tool calls / step"),
    ("tool_calls_total", "tool calls, total"),
    ("probe_rollouts_generated", "warm-start probe rollouts charged"),
)


AXIS_UNITS = {"rollouts": "rollouts", "rollout_equivalents": "rollout-eq."}


def _curve_table(curves: Mapping[str, Sequence[LearningCurve]], axis: str = "rollouts") -> str:
    """Final accuracy (on the rollouts axis only), AUC and the spend to the baseline's final accuracy on ``axis``,
    with paired intervals; the baseline is the first method (compare's first --methods entry). Empty when no run
    was evaluated."""
    labels = list(curves)
    if not labels or not any(c.step.size for seeds in curves.values() for c in seeds):
        return ""
    baseline = labels[0]
    summaries = curve_summaries(curves, baseline, axis)
    auc_key, reach_key, share_key = summary_keys(axis)
    cross_share_key = crossing_keys(axis)[1]
    low, high = common_range([c for seeds in curves.values() for c in seeds], axis)
    unit = AXIS_UNITS[axis]
    with_final = axis == "rollouts"

    def column(label: str, key: str) -> list[float]:
        return [row[key] for row in summaries[label]]

    def paired(label: str, key: str, share: bool) -> str:
        return (
            "baseline"
            if label == baseline
            else _paired_cell(column(label, key), column(baseline, key), share)
        )

    head = "<tr><th>method</th><th>seeds</th>"
    if with_final:
        head += f"<th>final pass@1</th><th>final pass@1 − {_e(baseline)}</th>"
    head += (
        f"<th>AUC</th><th>AUC − {_e(baseline)}</th><th>{unit} to {_e(baseline)}'s final pass@1</th>"
        f"<th>share of {_e(baseline)}'s {unit}</th><th>{unit} to it − {_e(baseline)}</th>"
        f"<th>share of {_e(baseline)}'s own first crossing</th></tr>"
    )
    body = []
    for label in labels:
        k = len(curves[label])
        reached = [x for x in column(label, reach_key) if np.isfinite(x)]
        if reached:
            reach_text = _count_cell(reached)
            share_text = _cell([x for x in column(label, share_key) if np.isfinite(x)], True, False)[0]
            crossed = [x for x in column(label, cross_share_key) if np.isfinite(x)]
            cross_text = _cell(crossed, True, False)[0] if crossed else "–"
            if len(reached) < k:
                reach_text += f" <span class='pm'>reached in {len(reached)} of {k} seeds</span>"
        else:
            reach_text, share_text, cross_text = "not reached", "–", "–"
        cells = (
            [_cell(column(label, "final_accuracy"), True, False)[0], paired(label, "final_accuracy", True)]
            if with_final
            else []
        )
        cells += [
            _cell(column(label, auc_key), True, False)[0],
            paired(label, auc_key, True),
            reach_text,
            share_text,
            paired(label, reach_key, False),
            cross_text,
        ]
        body.append(
            f"<tr data-row='{_e(label)}'><td>{_e(label)}</td><td>{k}</td>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + "</tr>"
        )
    note = (
        "Final pass@1: mean of each run's last two held-out evaluations after step 0. " if with_final else ""
    ) + (
        f"AUC: mean pass@1 over the range of {unit} every run covers ({fmt_number(low)} to {fmt_number(high)}; "
        "the area under the piecewise-linear curve divided by the range). Spend to the baseline's final pass@1: "
        "where a run's curve first reaches the final pass@1 of the baseline's run with the same seed (linear "
        "between evaluations); its share divides by that baseline run's spend at its last evaluation (its whole run), "
        "and by the baseline run's own first crossing of its final (1.0: as fast as the baseline got there). A run "
        "whose method reads the warm start's probe starts its curve at the probe's cost. Mean over "
        "seeds ± 95 % Student-t half-width; differences are paired by seed: mean [95 % t-interval]."
    )
    title = (
        f"Learning curves at equal generated budget: against generated rollouts (baseline {_e(baseline)})"
        if with_final
        else "The same against rollout-equivalents (a replay costs budget.replay_cost; compare's equal budget)"
    )
    role = "curve-table" if with_final else f"curve-table-{_e(axis)}"
    return f"<h2>{title}</h2><table data-role='{role}'>{head}{''.join(body)}</table><p class='sub'>{_e(note)}</p>"


def _cost_table(runs: Runs) -> str:
    """Generated rollouts, rollout-equivalents, tokens and tool calls per step and in total, per method."""
    costs = {label: [run_cost(recs) for recs in seeds] for label, seeds in runs.items()}
    head = "<tr><th>method</th>" + "".join(f"<th>{_e(h)}</th>" for _, h in COST_COLUMNS) + "</tr>"
    body = []
    fallback = False
    for label, rows in costs.items():
        stand_in = any(r.get("rollouts_generated_logged") == 0.0 for r in rows if r.get("steps"))
        fallback |= stand_in
        tds = []
        for key, _ in COST_COLUMNS:
            values = [r[key] for r in rows if key in r]
            text = _count_cell(values) if values else "–"
            tds.append(text + ("*" if stand_in and key.startswith("rollouts_generated") and values else ""))
        body.append(
            f"<tr data-row='{_e(label)}'><td>{_e(label)}</td>"
            + "".join(f"<td>{t}</td>" for t in tds)
            + "</tr>"
        )
    note = "Cost as generated: mean over seeds ± 95 % Student-t half-width of each run's mean per step and total."
    if fallback:
        note += " *: some steps did not log rollouts_generated; their budget_spent stands in."
    return (
        f"<h2>Cost as generated</h2><table data-role='cost-table'>{head}{''.join(body)}</table>"
        f"<p class='sub'>{_e(note)}</p>"
    )


def _sft_of(root: Path) -> dict[str, Any] | None:
    path = next(
        (p for p in (root / "sft" / "sft.json", root / "warm_start" / "sft" / "sft.json") if p.exists()), None
    )
    return json.loads(path.read_text()) if path is not None else None


def _config_of(root: Path) -> dict[str, Any] | None:
    path = root / "config.json"
    try:
        data = json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def write_report(folder: str | Path) -> Path:
    """Write folder/report.html (and PNGs under folder/report/) from the logs; returns the HTML path.

    Raises:
        ValueError: the folder has no metrics.jsonl and no comparison.json.
    """
    root = Path(folder)
    runs, comparison = _runs_of(root)
    img = root / "report"
    img.mkdir(parents=True, exist_ok=True)
    figures: list[tuple[str, str]] = []
    if comparison is not None and _interval_plot(img / "intervals.png", comparison):
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
    curves = _curves(runs)
    for axis, name in (
        ("rollouts", "accuracy_vs_rollouts.png"),
        ("rollout_equivalents", "accuracy_vs_rollout_eq.png"),
        ("tokens", "accuracy_vs_tokens.png"),
    ):
        same = all(np.array_equal(c.rollouts, c.rollout_equivalents) for cs in curves.values() for c in cs)
        if axis == "rollout_equivalents" and same:
            continue  # flat methods only: the rollouts plot is this one
        title = f"{_eval_title(runs)} vs {AXIS_LABELS[axis].split(' (')[0]}"
        if _learning_curve_plot(img / name, title, curves, axis):
            figures.append((name, title))
    for name, title, key, kind in plots:
        if _line_plot(img / name, title, runs, key, kind):
            figures.append((name, title))
    if _depth_plot(img / "replay_depths.png", runs):
        figures.append(("replay_depths.png", "Replay depth histogram"))
    if _flip_plot(img / "replay_flips.png", runs):
        figures.append(("replay_flips.png", "Replay flip rate by anchor depth"))
    if _time_plot(img / "wall_clock.png", runs):
        figures.append(("wall_clock.png", "Wall-clock breakdown"))
    if _calibration_plot(img / "predictor_depth_calibration.png", runs):
        figures.append(("predictor_depth_calibration.png", "Predictor error by depth and calibration"))
    sft = _sft_of(root)
    if sft is not None and _warm_start_plot(img / "warm_start.png", sft):
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
        summary = "<h2>Methods at equal budget</h2>" + _compare_table(comparison)
        summary += _curve_table(curves) + _curve_table(curves, "rollout_equivalents") + _cost_table(runs)
        shares = {label: time_shares(train_records(recs)) for label, recs in _pooled(runs).items()}
        if any(shares.values()):
            summary += _time_table({label: share for label, share in shares.items() if share})
        details = ""
    else:
        recs = next(iter(runs.values()))[0]
        config = _config_of(root)
        title = f"trace-rl report: {root.name}"
        sub = run_title(recs, config)
        summary = "<h2>Summary</h2>" + _cards(run_headline(recs, config, sft))
        share = time_shares(train_records(recs))
        if share:
            summary += _time_bar("share of the step wall-clock (summed over steps)", share)
        details = _last_step_table(train_records(recs))
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>{_e(title)}</h1><p class='sub'>{_e(sub)}</p>",
        f"<section data-role='summary'>{summary}</section>",
        f"<h2>Plots</h2>{_figures(img, figures)}" if figures else "",
        details,
        "</main></body></html>",
    ]
    out = root / "report.html"
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
