"""Small run and compare folders with known numbers, written the way `trace-rl train` / `compare` write them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trace_rl.train.rundir import summarize  # what compare stores per seed

TIME_SPLIT = {
    "generation": 0.4,
    "tools": 0.2,
    "predictor": 0.1,
    "allocation": 0.05,
    "update": 0.2,
}  # other: 0.05


def train_record(step: int, method: str, effective_ratio: float, success_rate: float) -> dict:
    wall = 4.0 + 0.1 * step
    rec = {
        "step": step,
        "method": method,
        "allocation": method,
        "budget_spent": 64.0,
        "budget_total": 64.0,
        "effective_ratio": effective_ratio,
        "success_rate": success_rate,
        "skip_rate": 0.25,
        "active_prompts": 8,
        "root_rollouts": 32,
        "replays": 64,
        "replay_depths": [0, 40, 24],
        "replay_flip_rate_depth_1": 0.3,
        "fresh_flip_rate_depth_1": 0.45,
        "replay_flip_rate_depth_2": 0.1,
        "fresh_flip_rate_depth_2": 0.4,
        "rollouts_per_active_prompt": 12.0,
        "tokens_generated": 12345,
        "tool_calls": 120,
        "wall_s": wall,
        "predictor_share": 0.1,
        "predictor_mse": 0.2 - 0.001 * step,
        "predictor_spearman": 0.45,
        "predictor_ece": 0.06,
        "predictor_mse_depth_0": 0.21,
        "predictor_mse_depth_1": 0.19,
        "update_loss": 0.47159032700000125,
    }
    rec.update({f"time_{k}_s": v * wall for k, v in TIME_SPLIT.items()})
    return rec


def eval_record(step: int, method: str, accuracy: float) -> dict:
    return {
        "kind": "eval",
        "step": step,
        "method": method,
        "eval_accuracy": accuracy,
        "eval_tasks": 128,
        "eval_samples": 2,
        "eval_temperature": 1.0,
        "eval_s": 11.5,
    }


def write_run(folder: Path, method: str = "trace", steps: int = 20, offset: float = 0.0) -> list[dict]:
    """A run folder: effective ratio 0.40 -> 0.59 (mean 0.495 + offset), eval at 0/10/20: 0.43, 0.44, 0.46."""
    folder.mkdir(parents=True, exist_ok=True)
    records: list[dict] = [eval_record(0, method, 0.43 + offset)]
    for step in range(1, steps + 1):
        records.append(train_record(step, method, 0.39 + 0.01 * step + offset, 0.45 + offset))
        if step % 10 == 0:
            records.append(eval_record(step, method, 0.43 + 0.015 * step / 10 + offset))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {"method": method, "preset": "demo", "steps": steps, "policy": {"name": "tiny", "sft_steps": 0}}
    config["budget"] = {"roots": 32, "continuations": 2}
    (folder / "config.json").write_text(json.dumps(config))
    return records


def write_compare(folder: Path, offsets: dict[str, list[float]]) -> dict:
    """A compare folder: per method, one run per seed shifted by that seed's offset; comparison.json as
    `trace-rl compare` writes it (per seed the run's `summarize`, per method their mean and sample std)."""
    methods = {}
    for method, seed_offsets in offsets.items():
        runs = [
            summarize(write_run(folder / method / f"seed_{k}", method, 20, off))
            for k, off in enumerate(seed_offsets)
        ]
        row: dict = {"seeds": len(runs), "runs": runs}
        for key in runs[0]:
            vals = [r[key] for r in runs]
            row[key] = float(np.mean(vals))
            row[f"{key}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        methods[method] = row
    data = {"preset": "demo", "budget_total": 64.0, "methods": methods, "config": {}}
    (folder / "comparison.json").write_text(json.dumps(data))
    return data
