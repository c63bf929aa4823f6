"""Equal-budget comparison of methods over seeds: one run per (method, seed), then comparison.json.

All runs of a comparison start from the same policy: when the preset has a warm start, it is run once (seed 0)
into DIR/warm_start/ and every (method, seed) run starts from that checkpoint, so differences come from where
the samples go, not from different initial policies.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.train.config import TrainConfig, budget_shape, validate
from trace_rl.train.run import Trainer, read_metrics, summarize, train

METRICS = (
    "effective_ratio",
    "success_rate",
    "eval_accuracy",
    "budget_spent",
    "skip_rate",
    "active_prompts",
    "replays",
    "wall_s",
)


def warm_start_once(cfg: TrainConfig, out: Path, log: Callable[[str], None] = print) -> TrainConfig:
    """Run the config's warm start once into out/warm_start/ and return a config starting from it."""
    if cfg.policy.sft_steps == 0:
        return cfg
    folder = out / "warm_start"
    policy_dir = folder / "sft" / "policy"
    if not policy_dir.exists():
        trainer = Trainer(replace(cfg, steps=1), folder, log=log)
        trainer.prepare_policy_only()
    new = replace(cfg, policy=replace(cfg.policy, name=str(policy_dir.resolve()), sft_steps=0))
    validate(new)
    return new


def compare(
    cfg: TrainConfig,
    methods: Sequence[str],
    seeds: int,
    out: str | Path,
    *,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train every method with seeds 0..seeds-1 at the config's budget; write and return comparison.json."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    base = warm_start_once(cfg, root, log)
    per_method: dict[str, dict[str, Any]] = {}
    for method in methods:
        runs = []
        for seed in range(seeds):
            run_dir = root / method / f"seed_{seed}"
            run_cfg = replace(base, method=method, seed=seed)
            validate(run_cfg)
            log(f"== {method} seed {seed} -> {run_dir}")
            train(run_cfg, run_dir, resume=(run_dir / "checkpoints").exists(), progress=progress)
            runs.append(summarize(read_metrics(run_dir / "metrics.jsonl")))
        row: dict[str, Any] = {"seeds": seeds}
        for key in METRICS:
            vals = [r[key] for r in runs if key in r]
            if vals:
                row[key] = float(np.mean(vals))
                row[f"{key}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        row["runs"] = runs
        per_method[method] = row
    result = {
        "preset": cfg.preset,
        "budget_total": budget_shape(cfg).total,
        "methods": per_method,
        "config": base.to_dict(),
    }
    (root / "comparison.json").write_text(json.dumps(result, indent=2))
    return result
