"""A run's output folder: its layout, the metrics log, the saved config, and the helpers the CLI uses on it.

Output folder layout::

    DIR/config.json                  the resolved config, and its "provenance" block (trace_rl.train.provenance)
    DIR/metrics.jsonl                one record per training step (and "eval" records), each step exactly once
    DIR/tb/                          TensorBoard event files
    DIR/sft/                         the warm-started policy (when policy.sft_steps > 0) and sft.json
    DIR/checkpoints/step_<N>/        policy, optimizer, predictor, RNG states, data position (atomic)
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.errors import UserError
from trace_rl.metrics.curves import step_means
from trace_rl.metrics.summary import train_records
from trace_rl.train.config import TrainConfig, config_from_dict
from trace_rl.train.provenance import config_dict

# What a run writes into its folder; `clear_run` removes exactly these (and nothing else a user keeps there).
RUN_FILES = ("metrics.jsonl", "config.json", "report.html", "servers.json")
RUN_DIRS = ("checkpoints", "tb", "sft", "sft.tmp", "report", "served")


def strict_json(x: Any) -> Any:
    """NaN and infinities become null, so every line is strict JSON (jq, JavaScript)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [strict_json(v) for v in x]
    return x


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record as a strict-JSON line and fsync it (a kill loses at most the line being written)."""
    with path.open("a") as fh:
        fh.write(json.dumps(strict_json(record), default=json_default, allow_nan=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def json_default(x: Any) -> Any:
    """``json.dumps`` default for numpy scalars and arrays."""
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x)}")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl, or of a gzip-compressed one (a name ending in ``.gz``: logs kept in the
    repository, results/README.md); a torn last line from a kill is ignored; no records for a missing file."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    text = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def tensorboard(path: Path, purge_step: int) -> Any:
    """A SummaryWriter; on resume, events at or after ``purge_step`` (redone steps) are purged."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: the jsonl log still has everything
        return None
    return SummaryWriter(str(path), purge_step=purge_step if purge_step > 1 else None)


def tb_write(writer: Any, record: dict[str, Any], step: int) -> None:
    """Every numeric field of a record as a scalar under train/ or eval/ (nothing when ``writer`` is None)."""
    if writer is None:
        return
    prefix = "eval" if record.get("kind") == "eval" else "train"
    for key, value in record.items():
        if key == "backend_requests_per_replica":  # a list: one scalar per replica
            for i, count in enumerate(value):
                writer.add_scalar(f"{prefix}/{key}/{i}", count, step)
        if isinstance(value, bool) or not isinstance(value, int | float) or key == "step":
            continue
        writer.add_scalar(f"{prefix}/{key}", value, step)
    writer.flush()


def progress_bar(start: int, total: int, enabled: bool) -> Any:
    """A tqdm bar over the run's steps, or None when disabled (one log line per step instead)."""
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=start - 1, desc="train", unit="step", dynamic_ncols=True)


def resume_config(out: str | Path) -> TrainConfig:
    """The config a run in ``out`` was started with (for --resume)."""
    path = Path(out) / "config.json"
    if not path.exists():
        raise UserError(f"{out} holds no config.json: not a trace-rl run folder")
    return config_from_dict(config_dict(_read_config(path)))


def _read_config(path: Path) -> dict[str, Any]:
    """A run's config.json as a dict; UserError (one line) when it is damaged."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path} is damaged ({exc}); it is not a config trace-rl wrote") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is damaged: a JSON {type(data).__name__}, not a config object")
    return data


def clear_run(out: str | Path) -> None:
    """Delete an earlier run's files from ``out`` (for ``trace-rl train --overwrite``)."""
    root = Path(out)
    for name in RUN_FILES:
        (root / name).unlink(missing_ok=True)
    for name in RUN_DIRS:
        shutil.rmtree(root / name, ignore_errors=True)


RUNTIME_KEYS = ("threads",)
"""Config keys that change how fast a run goes, not what it computes: a run may be continued with others (a
comparison resumed with another ``--jobs`` gives its runs another ``threads``)."""


def check_same_config(cfg: TrainConfig, out: str | Path) -> None:
    """Raise UserError (a ValueError) when ``out`` holds a run (config.json) started with a different config than ``cfg``
    (`RUNTIME_KEYS` aside; the provenance block is not part of the config)."""
    path = Path(out) / "config.json"
    if not path.exists():
        return
    saved = config_from_dict(config_dict(_read_config(path)))
    runtime = {key: getattr(cfg, key) for key in RUNTIME_KEYS}
    if replace(saved, **runtime) != cfg:
        raise UserError(
            f"{out} holds a run with a different config; use another --out (or delete that run) to start afresh"
        )


def log_finished(records: Sequence[dict[str, Any]], config: dict[str, Any]) -> bool | None:
    """Whether a run's log shows it finished, by the rule the training loop stops on: its last training step is
    ``steps``, or (``total_budget`` > 0) the budget left after it could not pay one more step; and, with
    ``eval_every`` > 0, the held-out evaluation after that step is logged. ``config`` is the run's saved
    config.json (a dict). None when the config lacks what the rule needs (unknown).
    """
    from trace_rl.allocation import BudgetShape

    try:
        steps, total = int(config["steps"]), float(config.get("total_budget", 0.0))
        eval_every = int(config.get("eval_every", 0))
        b = config["budget"]
        shape = BudgetShape(
            roots=int(b["roots"]),
            continuations=int(b["continuations"]),
            group_size=int(b["group_size"]),
            replay_cost=float(b["replay_cost"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    train_recs = [r for r in records if r.get("kind", "train") == "train"]
    if not train_recs:
        return False
    last = max(train_recs, key=lambda r: int(r.get("step", 0)))
    step = int(last.get("step", 0))
    spent = last.get("budget_spent_total")
    done = step >= steps or (
        total > 0 and isinstance(spent, int | float) and total - float(spent) < shape.total - 1e-9
    )
    evaluated = eval_every == 0 or any(
        r.get("kind") == "eval" and int(r.get("step", -1)) == step for r in records
    )
    return bool(done and evaluated)


SUMMARY_KEYS = (
    "effective_ratio",
    "success_rate",
    "budget_spent",
    "skip_rate",
    "active_prompts",
    "replays",
    "wall_s",
)
"""The headline metrics `summarize` averages over a run's training records."""


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Means over a run's train records of the headline metrics (`SUMMARY_KEYS`, by
    `trace_rl.metrics.curves.step_means`: a metric some record lacks is left out), and the first and last eval
    accuracy."""
    evals = [r for r in records if r.get("kind") == "eval"]
    out = step_means(train_records(records), SUMMARY_KEYS)
    if evals:
        out["eval_accuracy"] = float(evals[-1]["eval_accuracy"])
        out["eval_accuracy_first"] = float(evals[0]["eval_accuracy"])
    return out
