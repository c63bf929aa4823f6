"""Headline numbers of a run or a comparison, and how the report prints them: pure functions of log records.

    time_shares(train_records)      -> {"generation": 0.31, ..., "other": 0.02}   shares of the step wall-clock
    t_interval(values)              -> (mean, half-width of the two-sided 95 % Student-t interval)
    run_headline(records, config)   -> [Headline(label, value, detail), ...]       the dashboard's summary panel
    format_field(key, value)        -> "4.38 s" / "48.7 %" / "0.4716" / "12,345"   never a raw float repr

Used by trace_rl.metrics.report; the records are the lines of metrics.jsonl (DESIGN.md: metrics are pure
functions of records, the report only reads the logs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trace_rl.metrics.intervals import mean_ci
from trace_rl.metrics.numbers import is_finite_number

TIME_PARTS = ("generation", "tools", "predictor", "allocation", "update")
TIME_KEYS = tuple(f"time_{p}_s" for p in TIME_PARTS)
TIME_NAMES = (*TIME_PARTS, "other")  # the keys of `time_shares`
TIME_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
)  # per name: plot and HTML bar

Record = Mapping[str, Any]


@dataclass(frozen=True)
class Headline:
    """One tile of the summary panel: a label, the formatted value, a line of detail (may be empty)."""

    label: str
    value: str
    detail: str = ""


# ------------------------------------------------------------------------------------------------ formatting
def fmt_number(x: float | None) -> str:
    """A plain number at sensible precision: 12,345 / 64 / 4.5 / 0.4716 / 1.2e-05."""
    if x is None or not is_finite_number(x):
        return "–"
    v = float(x)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == int(v):
        return str(int(v))
    if abs(v) < 1e-3:
        return f"{v:.2g}"
    return f"{v:.4g}"


def fmt_mean(x: float | None) -> str:
    """A mean of counts: one decimal unless whole ('2.9', '8', '1,234')."""
    if x is None or not is_finite_number(x):
        return "–"
    return fmt_number(float(x)) if float(x) == int(x) or abs(x) >= 1000 else f"{float(x):.1f}"


def fmt_share(x: float | None, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage: 0.487 -> '48.7 %'."""
    return f"{100 * float(x):.{digits}f} %" if x is not None and is_finite_number(x) else "–"


def fmt_points(x: float | None) -> str:
    """A difference of two shares in percentage points, signed: 0.031 -> '+3.1 pts'."""
    return f"{100 * float(x):+.1f} pts" if x is not None and is_finite_number(x) else "–"


def fmt_seconds(x: float | None) -> str:
    """A duration: 0.012 -> '12 ms', 4.381 -> '4.38 s', 131 -> '2 min 11 s', 5400 -> '1 h 30 min'."""
    if x is None or not is_finite_number(x):
        return "–"
    v = float(x)
    if v < 1:
        return f"{1000 * v:.0f} ms"
    if v < 10:
        return f"{v:.2f} s"
    if v < 60:
        return f"{v:.1f} s"
    if v < 3600:
        return f"{int(v // 60)} min {round(v % 60):d} s"
    return f"{int(v // 3600)} h {round(v % 3600 / 60):d} min"


def format_field(key: str, value: object) -> str:
    """Any logged field for display: durations (keys ending in _s / _seconds) as times, numbers at 4 digits."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        if key.endswith(("_s", "_seconds")):
            return fmt_seconds(float(value))
        return fmt_number(float(value))
    if isinstance(value, list | tuple):
        items = [format_field("", v) for v in value[:12]]
        return "[" + ", ".join(items) + (", …" if len(value) > 12 else "") + "]"
    return str(value)


# ------------------------------------------------------------------------------------------------ statistics
def mean(values: Sequence[float]) -> float:
    """Mean of the finite values; NaN when there is none."""
    vals = [float(v) for v in values if is_finite_number(v)]
    return sum(vals) / len(vals) if vals else math.nan


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width) of the two-sided 95 % Student-t interval of the mean over seeds, missing (non-finite)
    values skipped: `trace_rl.metrics.intervals.mean_ci` (half = t_{0.975, n-1} * s / sqrt(n), s the sample
    standard deviation, ddof 1). NaN mean for no value, NaN half-width for fewer than 2 values.
    """
    vals = [float(v) for v in values if is_finite_number(v)]
    if not vals:
        return math.nan, math.nan
    ci = mean_ci(vals)
    return ci.mean, (ci.half_width if ci.n >= 2 else math.nan)


def train_records(records: Sequence[Record]) -> list[Record]:
    """The per-step training records (lines without a kind are training records, as in old logs)."""
    return [r for r in records if r.get("kind", "train") == "train"]


def eval_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.get("kind") == "eval" and is_finite_number(r.get("eval_accuracy"))]


def time_shares(train: Sequence[Record]) -> dict[str, float]:
    """Share of the summed step wall-clock spent in each exclusive part, plus 'other' (the rest, >= 0).

    share_p = sum_steps time_p_s / sum_steps wall_s; empty dict when no step logged a wall-clock.
    """
    wall = sum(float(r.get("wall_s", 0.0) or 0.0) for r in train)
    if wall <= 0:
        return {}
    parts = {
        p: sum(float(r.get(k, 0.0) or 0.0) for r in train) for p, k in zip(TIME_PARTS, TIME_KEYS, strict=True)
    }
    out = {p: v / wall for p, v in parts.items()}
    out["other"] = max(wall - sum(parts.values()), 0.0) / wall
    return out


def eval_decoding(records: Sequence[Record]) -> str:
    """How held-out pass@1 was decoded: 'greedy' or 'mean of k samples per task at temperature T'."""
    rec = next(iter(eval_records(records)), None)
    if rec is None:
        return ""
    temperature = float(rec.get("eval_temperature", 0.0) or 0.0)
    if temperature <= 0:
        return "greedy"
    return f"mean of {int(rec.get('eval_samples', 1))} samples per task at temperature {temperature:g}"


# ------------------------------------------------------------------------------------------------ headlines
def _series(train: Sequence[Record], key: str) -> list[float]:
    return [float(r[key]) for r in train if is_finite_number(r.get(key))]


def _first_last(values: Sequence[float], fmt: Any = fmt_share) -> str:
    return f"first step {fmt(values[0])}, last {fmt(values[-1])}" if values else ""


def run_headline(
    records: Sequence[Record],
    config: Mapping[str, Any] | None = None,
    sft: Mapping[str, Any] | None = None,
) -> list[Headline]:
    """The summary panel of one run, from its metrics.jsonl records (plus config.json and sft.json if given)."""
    train = train_records(records)
    evals = eval_records(records)
    out: list[Headline] = []
    eff = _series(train, "effective_ratio")
    out.append(
        Headline(
            "Effective ratio",
            fmt_share(mean(eff)),
            f"mean over {len(eff)} steps; {_first_last(eff)}" if eff else "no training step logged",
        )
    )
    if evals:
        first, last = evals[0], evals[-1]
        a, b = float(first["eval_accuracy"]), float(last["eval_accuracy"])
        tasks = first.get("eval_tasks")
        detail = f"step {first.get('step', 0)} → {last.get('step', 0)}: {fmt_points(b - a)}"
        detail += f"; {eval_decoding(records)}" + (f", {tasks} tasks" if tasks else "")
        out.append(Headline("Held-out pass@1", f"{fmt_share(a)} → {fmt_share(b)}", detail))
    else:
        out.append(Headline("Held-out pass@1", "–", "no evaluation logged"))
    succ = _series(train, "success_rate")
    out.append(Headline("Success rate (root rollouts)", fmt_share(mean(succ)), _first_last(succ)))
    spent, total = mean(_series(train, "budget_spent")), mean(_series(train, "budget_total"))
    parts = [
        f"{fmt_mean(mean(_series(train, 'root_rollouts')))} roots",
        f"{fmt_mean(mean(_series(train, 'replays')))} replays",
        f"{fmt_mean(mean(_series(train, 'active_prompts')))} active prompts",
    ]
    budget_value = (
        f"{fmt_number(spent)} of {fmt_number(total)}" if is_finite_number(total) else fmt_number(spent)
    )
    out.append(Headline("Budget per step", budget_value + " rollout-eq.", "mean " + ", ".join(parts)))
    out.append(
        Headline(
            "Skip rate",
            fmt_share(mean(_series(train, "skip_rate"))),
            f"{fmt_mean(mean(_series(train, 'rollouts_per_active_prompt')))} rollouts per active prompt",
        )
    )
    wall = _series(train, "wall_s")
    tokens, tools = mean(_series(train, "tokens_generated")), mean(_series(train, "tool_calls"))
    out.append(
        Headline(
            "Step wall-clock",
            fmt_seconds(mean(wall)),
            f"total {fmt_seconds(sum(wall))}; per step {fmt_mean(round(tokens))} tokens, "
            f"{fmt_mean(tools)} tool calls"
            if wall and is_finite_number(tokens) and is_finite_number(tools)
            else "",
        )
    )
    mse = [r for r in train if is_finite_number(r.get("predictor_mse"))]
    if mse:
        last_rec = mse[-1]
        out.append(
            Headline(
                "Predictor MSE (last step)",
                fmt_number(float(last_rec["predictor_mse"])),
                f"Spearman {fmt_number(last_rec.get('predictor_spearman'))}, "
                f"ECE {fmt_number(last_rec.get('predictor_ece'))}; "
                f"{fmt_share(mean(_series(train, 'predictor_share')))} of wall-clock",
            )
        )
    if sft:
        history = [h for h in sft.get("history", []) if is_finite_number(h.get("mean_success"))]
        curve = [row for row in sft.get("loss_curve") or [] if len(row) == 2]
        detail = f"loss {fmt_number(curve[0][1])} → {fmt_number(curve[-1][1])} nats/token" if curve else ""
        if history:
            detail += f"; probe success {fmt_share(history[0]['mean_success'])} → {fmt_share(history[-1]['mean_success'])}"
        steps = curve[-1][0] if curve else (config or {}).get("policy", {}).get("sft_steps", "?")
        out.append(Headline("Warm start", f"{fmt_number(steps)} SFT steps", detail))
    return out


def run_title(records: Sequence[Record], config: Mapping[str, Any] | None) -> str:
    """One line naming the run: method, preset, steps, budget shape, policy."""
    cfg = config or {}
    train = train_records(records)
    method = cfg.get("method") or next((r.get("method") for r in records if r.get("method")), "run")
    bits = [f"method {method}"]
    if cfg.get("preset"):
        bits.append(f"preset {cfg['preset']}")
    bits.append(f"{len(train)} steps")
    budget = cfg.get("budget") or {}
    if budget.get("roots") is not None:
        bits.append(f"{budget['roots']} roots × {budget.get('continuations', 0)} continuations per step")
    policy = (cfg.get("policy") or {}).get("name")
    if policy:
        bits.append(f"policy {policy}")
    return " · ".join(bits)
