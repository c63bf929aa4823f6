"""The report's HTML: the page, its summary cards, tables and figure grid, as strings (every value escaped).

    page(title, sub, summary, img, figures, details)  -> the whole self-contained document (style inline)
    cards(headlines), time_bar, time_table            -> a run's summary panel, the wall-clock shares
    compare_table, curve_table, cost_table            -> a compare folder's methods side by side, 95 % intervals
    figure_grid(img, figures)                         -> the plots, embedded as data URIs
    last_step_table(train)                            -> every field of the last step, folded

Numbers are printed by trace_rl.metrics.summary's formatters (units, never a raw float repr). Used by
trace_rl.metrics.report.write_report.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.metrics.curves import (
    LearningCurve,
    common_range,
    crossing_keys,
    curve_summaries,
    paired_interval,
    run_cost,
    summary_keys,
)
from trace_rl.metrics.run_logs import COMPARE_METRICS, Runs, seed_values
from trace_rl.metrics.summary import (
    TIME_COLOURS,
    TIME_NAMES,
    Headline,
    fmt_mean,
    fmt_number,
    fmt_points,
    fmt_seconds,
    fmt_share,
    format_field,
    t_interval,
)

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


def _e(text: object) -> str:
    return html.escape(str(text))


def cards(items: Sequence[Headline]) -> str:
    """The summary panel: one tile per headline (label, value, detail)."""
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


def time_bar(label: str, shares: Mapping[str, float]) -> str:
    """One run: a stacked bar of the wall-clock shares with a legend that gives each share."""
    legend = "".join(
        f"<span><i style='background:{c}'></i>{n} {fmt_share(shares[n])}</span>"
        for n, c in zip(TIME_NAMES, TIME_COLOURS, strict=True)
    )
    return (
        f"<div data-role='time-shares'><div class='sub' style='margin:8px 0 0'>{_e(label)}</div>"
        f"<div class='timebar'>{_segments(shares)}</div><div class='legend'>{legend}</div></div>"
    )


def time_table(shares: Mapping[str, Mapping[str, float]]) -> str:
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


def figure_grid(img: Path, figures: Sequence[tuple[str, str]]) -> str:
    """The plots (file name under ``img``, caption) as a two-column grid of embedded PNGs; the interval and
    warm-start plots span both columns."""
    wide = {"intervals.png", "warm_start.png"}
    out = []
    for name, caption in figures:
        cls = "wide" if name in wide else ""
        out.append(
            f"<figure class='{cls}' data-file='report/{_e(name)}'><img src='{_image(img / name)}' "
            f"alt='{_e(caption)}' title='{_e(caption)}'></figure>"
        )
    return "<div class='grid'>" + "".join(out) + "</div>"


def last_step_table(train: Sequence[Mapping[str, Any]]) -> str:
    """Every logged field of the last training record, in a folded table (empty without records)."""
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


def compare_table(comparison: Mapping[str, Any]) -> str:
    """The methods of a comparison.json side by side (`COMPARE_METRICS`, mean ± 95 % t half-width over seeds),
    with the effective ratio against the baseline (grpo if present, else the first method) and held-out pass@1
    first → last."""
    methods = comparison["methods"]
    baseline = "grpo" if "grpo" in methods else next(iter(methods))
    base_eff = t_interval(seed_values(methods[baseline], "effective_ratio"))[0]
    head = "<tr><th>method</th><th>seeds</th>" + "".join(
        f"<th>{_e(lab)}</th>" for _, lab, _ in COMPARE_METRICS
    )
    head += f"<th>effective ratio vs {_e(baseline)}</th><th>held-out first → last</th></tr>"
    cells: dict[str, list[tuple[str, float]]] = {}
    for method, row in methods.items():
        cells[method] = [
            _cell(seed_values(row, key), share, key == "wall_s") for key, _, share in COMPARE_METRICS
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
        first = t_interval(seed_values(row, "eval_accuracy_first"))[0]
        last = cells[method][2][1]
        held = (
            f"{fmt_share(first)} → {fmt_share(last)} ({fmt_points(last - first)})"
            if not np.isnan(first)
            else "–"
        )
        seeds = row.get("seeds", len(seed_values(row, "effective_ratio")))
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


def curve_table(curves: Mapping[str, Sequence[LearningCurve]], axis: str = "rollouts") -> str:
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


def cost_table(runs: Runs) -> str:
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


def page(
    title: str, sub: str, summary: str, img: Path, figures: Sequence[tuple[str, str]], details: str
) -> str:
    """The whole report.html: the title and its subtitle, the summary section, the figures under ``img`` (name,
    caption) as a grid of embedded images when there are any, then ``details``."""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>{_e(title)}</h1><p class='sub'>{_e(sub)}</p>",
        f"<section data-role='summary'>{summary}</section>",
        f"<h2>Plots</h2>{figure_grid(img, figures)}" if figures else "",
        details,
        "</main></body></html>",
    ]
    return "\n".join(parts)
