"""HTML report of a run folder or a compare folder: PNG plots read from metrics.jsonl only.

    write_report(DIR) -> DIR/report.html

A run folder holds metrics.jsonl; a compare folder holds comparison.json and one run folder per
method and seed (DIR/<method>/seed_<k>/metrics.jsonl), plotted side by side.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

TIME_KEYS = ("time_generation_s", "time_tools_s", "time_predictor_s", "time_allocation_s", "time_update_s")


def _records(path: Path) -> list[dict[str, Any]]:
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


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(plt: Any, fig: Any, path: Path, drawn: bool) -> bool:
    """Save and close a figure when something was drawn on it; report whether it was saved."""
    if drawn:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def _line_plot(
    path: Path, title: str, runs: dict[str, list[dict[str, Any]]], key: str, kind: str = "train"
) -> bool:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    drawn = False
    for label, recs in runs.items():
        x, y = _series(recs, key, kind)
        if x.size:
            ax.plot(x, y, marker="o", ms=3, label=label)
            drawn = True
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def _depth_plot(path: Path, runs: dict[str, list[dict[str, Any]]]) -> bool:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / max(len(runs), 1)
    drawn = False
    for j, (label, recs) in enumerate(runs.items()):
        hists = [
            np.asarray(r.get("replay_depths") or [], dtype=float)
            for r in recs
            if r.get("kind", "train") == "train"
        ]
        hists = [h for h in hists if h.size]
        if not hists:
            continue
        size = max(h.size for h in hists)
        total = np.sum([np.pad(h, (0, size - h.size)) for h in hists], axis=0)
        if total.sum() == 0:
            continue
        ax.bar(np.arange(size) + j * width, total / total.sum(), width=width, label=label)
        drawn = True
    ax.set_title("Replay depth (turns in the prefix), share of replays")
    ax.set_xlabel("prefix depth")
    ax.set_ylabel("share")
    if drawn:
        ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def _time_plot(path: Path, runs: dict[str, list[dict[str, Any]]]) -> bool:
    plt = _plt()
    labels, shares = [], []
    for label, recs in runs.items():
        train = [r for r in recs if r.get("kind", "train") == "train"]
        if not train:
            continue
        parts = np.array([sum(float(r.get(k, 0.0)) for r in train) for k in TIME_KEYS])  # exclusive times
        wall = sum(float(r.get("wall_s", 0.0)) for r in train)
        labels.append(label)
        shares.append(np.append(parts, max(wall - parts.sum(), 0.0)) / max(wall, 1e-9))
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.5 * len(labels) + 1.5))
    names = ["generation", "tools", "predictor", "allocation", "update", "other"]
    left = np.zeros(len(labels))
    for i, name in enumerate(names):
        vals = np.array([s[i] for s in shares])
        ax.barh(labels, vals, left=left, label=name)
        left += vals
    ax.set_xlabel("share of wall-clock")
    ax.set_title("Wall-clock breakdown per step")
    ax.legend(fontsize=7, ncol=3, loc="lower right")
    return _finish(plt, fig, path, True)


def _calibration_plot(path: Path, runs: dict[str, list[dict[str, Any]]]) -> bool:
    """Predictor error by depth (last logged step with depth metrics) and calibration error over steps."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    drawn = False
    for label, recs in runs.items():
        train = [r for r in recs if r.get("kind", "train") == "train"]
        depth_rows = [r for r in train if any(k.startswith("predictor_mse_depth_") for k in r)]
        if depth_rows:
            last = depth_rows[-1]
            depths = sorted(int(k.rsplit("_", 1)[1]) for k in last if k.startswith("predictor_mse_depth_"))
            ax1.plot(depths, [last[f"predictor_mse_depth_{d}"] for d in depths], marker="o", label=label)
            drawn = True
        x, y = _series(recs, "predictor_ece")
        if x.size:
            ax2.plot(x, y, marker="o", ms=3, label=label)
            drawn = True
    ax1.set_title("Predictor MSE by prefix depth (last step)")
    ax1.set_xlabel("depth (0 = prompt)")
    ax2.set_title("Predictor expected calibration error")
    ax2.set_xlabel("step")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    return _finish(plt, fig, path, drawn)


def _runs_of(folder: Path) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any] | None]:
    comparison = folder / "comparison.json"
    if comparison.exists():
        data = json.loads(comparison.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
            raise ValueError(f"{comparison} has no 'methods' table: not written by trace-rl compare")
        runs: dict[str, list[dict[str, Any]]] = {}
        for method in data.get("methods", {}):
            seeds = sorted((folder / method).glob("seed_*"))
            runs[method] = _records(seeds[0] / "metrics.jsonl") if seeds else []  # curves of the first seed
        return runs, data
    recs = _records(folder / "metrics.jsonl")
    if not recs:
        if (folder / "metrics.jsonl").exists():
            raise ValueError(f"{folder}/metrics.jsonl holds no readable record")
        raise ValueError(f"{folder} holds neither metrics.jsonl nor comparison.json")
    method = next((r.get("method") for r in recs if r.get("method")), "run")
    return {str(method): recs}, None


def _eval_title(runs: dict[str, list[dict[str, Any]]]) -> str:
    """Held-out pass@1, saying how it was decoded (greedy, or samples per task at a temperature)."""
    rec = next((r for recs in runs.values() for r in recs if r.get("kind") == "eval"), {})
    temperature = float(rec.get("eval_temperature", 0.0))
    if temperature <= 0:
        return "Held-out pass@1 (greedy)"
    return f"Held-out pass@1 (mean of {int(rec.get('eval_samples', 1))} samples per task at temperature {temperature:g})"


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
    plots = [
        (
            "effective_ratio.png",
            "Effective ratio (share of active prompts whose tree is mixed)",
            "effective_ratio",
            "train",
        ),
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
        ("eval_accuracy.png", _eval_title(runs), "eval_accuracy", "eval"),
    ]
    for name, title, key, kind in plots:
        if _line_plot(img / name, title, runs, key, kind):
            figures.append((name, title))
    if _depth_plot(img / "replay_depths.png", runs):
        figures.append(("replay_depths.png", "Replay depth histogram"))
    if _calibration_plot(img / "predictor_depth_calibration.png", runs):
        figures.append(("predictor_depth_calibration.png", "Predictor error by depth and calibration"))
    if _time_plot(img / "wall_clock.png", runs):
        figures.append(("wall_clock.png", "Wall-clock breakdown"))
    sft = next(
        (p for p in (root / "sft" / "sft.json", root / "warm_start" / "sft" / "sft.json") if p.exists()), None
    )
    if sft is not None and _warm_start_plot(img / "warm_start.png", json.loads(sft.read_text())):
        figures.insert(0, ("warm_start.png", "Warm start (SFT on gold trajectories) before RL"))

    title = f"trace-rl report: {root.name}"
    parts = [
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if comparison is not None:
        parts.append("<h2>Methods at equal budget</h2><table border='1' cellpadding='4'><tr><th>method</th>")
        cols = ["effective_ratio", "success_rate", "eval_accuracy", "budget_spent", "skip_rate"]
        parts.append("".join(f"<th>{c}</th>" for c in cols) + "</tr>")
        for method, row in comparison["methods"].items():
            cells = []
            for c in cols:
                m, s = row.get(c), row.get(f"{c}_std")
                cells.append(
                    f"<td>{m:.3f} ± {s:.3f}</td>"
                    if isinstance(m, int | float) and isinstance(s, int | float)
                    else f"<td>{m}</td>"
                )
            parts.append(f"<tr><td>{html.escape(method)}</td>{''.join(cells)}</tr>")
        parts.append("</table>")
    else:
        recs = next(iter(runs.values()))
        train = [r for r in recs if r.get("kind", "train") == "train"]
        if train:
            last = train[-1]
            parts.append("<h2>Last step</h2><table border='1' cellpadding='4'>")
            for k, v in last.items():
                if isinstance(v, int | float | str):
                    parts.append(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>")
            parts.append("</table>")
    for name, caption in figures:
        parts.append(f"<h3>{html.escape(caption)}</h3><img src='report/{name}'>")
    parts.append("</body></html>")
    out = root / "report.html"
    out.write_text("\n".join(parts))
    return out
