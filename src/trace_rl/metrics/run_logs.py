"""A report's inputs read from disk: a run folder's or a compare folder's logs, per method and seed.

    runs_of(DIR)                 -> ({method: [records of seed 0, seed 1, ...]}, comparison.json or None)
    read_records(path)           -> the lines of a metrics.jsonl as dicts (unreadable lines skipped)
    sft_of(DIR), config_of(DIR)  -> the warm start's sft.json, the run's config.json (None if absent)
    pooled_records(runs)         -> {method: every seed's records in one list}
    seed_values(row, key)        -> per-seed values of a metric in a comparison.json row
    learning_curves(runs)        -> {method: [LearningCurve per seed]} (trace_rl.metrics.curves.learning_curve)

A run folder holds metrics.jsonl (and config.json, sft/sft.json); a compare folder holds comparison.json and one
run folder per method and seed (DIR/<method>/seed_<k>/metrics.jsonl). Used by trace_rl.metrics.report, its plots
(trace_rl.metrics.plots) and its HTML (trace_rl.metrics.report_html).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.metrics.curves import LearningCurve, learning_curve

Records = list[dict[str, Any]]
Runs = dict[str, list[Records]]  # label -> one record list per seed


def read_records(path: Path) -> Records:
    """The records of a metrics.jsonl, one per line; lines that are not JSON (a torn last line) are skipped, and
    a missing file has none."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def runs_of(folder: Path) -> tuple[Runs, dict[str, Any] | None]:
    """The runs of a compare folder (per method of its comparison.json, its seed_<k> folders in seed order) with
    the comparison, or of a run folder (one method, named by its records, one seed) with None.

    Raises:
        UserError: a comparison.json without a 'methods' table, or no readable metrics.jsonl in a run folder.
    """
    comparison = folder / "comparison.json"
    if comparison.exists():
        data = json.loads(comparison.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
            raise UserError(f"{comparison} has no 'methods' table: not written by trace-rl compare")
        runs: Runs = {}
        for method in data.get("methods", {}):
            seeds = sorted((folder / method).glob("seed_*"), key=lambda p: (len(p.name), p.name))
            runs[method] = [read_records(s / "metrics.jsonl") for s in seeds] or [[]]
        return runs, data
    recs = read_records(folder / "metrics.jsonl")
    if not recs:
        if (folder / "metrics.jsonl").exists():
            raise UserError(f"{folder}/metrics.jsonl holds no readable record")
        raise UserError(f"{folder} holds neither metrics.jsonl nor comparison.json")
    method = next((r.get("method") for r in recs if r.get("method")), "run")
    return {str(method): [recs]}, None


def sft_of(root: Path) -> dict[str, Any] | None:
    """The warm start's sft.json (DIR/sft/ or DIR/warm_start/sft/), or None."""
    path = next(
        (p for p in (root / "sft" / "sft.json", root / "warm_start" / "sft" / "sft.json") if p.exists()), None
    )
    return json.loads(path.read_text()) if path is not None else None


def config_of(root: Path) -> dict[str, Any] | None:
    """The run's config.json as a dict; None when absent or not a JSON object."""
    path = root / "config.json"
    try:
        data = json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def pooled_records(runs: Runs) -> dict[str, Records]:
    """Every seed's records of a method in one list (for histograms and sums over steps)."""
    return {label: [r for recs in seeds for r in recs] for label, seeds in runs.items()}


# The compare table and interval plot: (key in comparison.json's per-seed summaries, label, is a share).
COMPARE_METRICS = (
    ("effective_ratio", "Effective ratio", True),
    ("success_rate", "Success rate", True),
    ("eval_accuracy", "Held-out pass@1 (last)", True),
    ("skip_rate", "Skip rate", True),
    ("budget_spent", "Budget spent / step", False),
    ("wall_s", "Wall-clock / step", False),
)


def seed_values(row: Mapping[str, Any], key: str) -> list[float]:
    """Per-seed values of a metric in a comparison.json row (its 'runs'); the mean alone if they are absent."""
    runs = row.get("runs")
    if isinstance(runs, list) and runs:
        return [float(r[key]) for r in runs if isinstance(r, dict) and isinstance(r.get(key), int | float)]
    return [float(row[key])] if isinstance(row.get(key), int | float) else []


def learning_curves(runs: Runs) -> dict[str, list[LearningCurve]]:
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
