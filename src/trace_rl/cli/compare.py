"""`trace-rl compare`: methods at equal budget over seeds -> DIR/comparison.json and DIR/report.html."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from trace_rl.allocation import METHODS

    p = sub.add_parser(
        "compare",
        help="run several methods at equal budget over seeds and compare them",
        description="Train every method with seeds 0..K-1 from one shared warm start, on the same held-out tasks, at "
        "the same total generated budget (steps x one step's budget), and write DIR/comparison.json, "
        "DIR/curves.json and DIR/report.html. Finished runs in DIR are read back, unfinished ones resume.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--preset", default=None, help="a shipped preset (demo when neither --preset nor --config)"
    )
    src.add_argument("--config", default=None, metavar="FILE", help="a YAML config file")
    p.add_argument(
        "--methods",
        default="grpo,pcl,treepo,trace",
        help="comma-separated methods; an entry LABEL=METHOD@KEY=VALUE;KEY=VALUE runs a method under its own label "
        "with config overrides (e.g. trace_32x6=trace@budget.roots=32;budget.continuations=6); the first entry is "
        f"the baseline of the paired differences. Methods: {', '.join(METHODS)}. Default: %(default)s",
    )
    p.add_argument("--seeds", type=int, default=1, help="seeds per method, 0..K-1 (default: %(default)s)")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="override the number of training steps (default: the config's)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once, each in its own process with one torch thread (default: %(default)s)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (required)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (repeatable; docs/config.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trace_rl.allocation import get_method
    from trace_rl.cli.common import UsageError
    from trace_rl.train.config import load_config

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise UsageError("--methods needs at least one method")
    from trace_rl.cli.common import user_input
    from trace_rl.train.compare_shared import parse_variant

    for m in methods:
        with user_input("--methods: "):
            get_method(parse_variant(m)[1])
    if args.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    overrides = list(args.set) + ([f"steps={args.steps}"] if args.steps is not None else [])
    cfg = load_config(
        preset=args.preset if args.preset or args.config else "demo", file=args.config, overrides=overrides
    )
    from trace_rl.cli.common import output_folder
    from trace_rl.metrics.report import write_report
    from trace_rl.train.compare import compare

    result = compare(cfg, methods, args.seeds, output_folder(args.out), jobs=args.jobs)
    for name, row in result["methods"].items():
        print(
            f"{name:18s} effective_ratio={row.get('effective_ratio', float('nan')):.3f} "
            f"success_rate={row.get('success_rate', float('nan')):.3f} "
            f"eval_accuracy={row.get('eval_accuracy', float('nan')):.3f} budget_spent={row.get('budget_spent', float('nan')):.1f}"
        )
    for pair, rows in result.get("paired", {}).items():
        er = rows.get("effective_ratio")
        if er is not None:
            print(
                f"{pair:24s} effective_ratio difference {er['mean']:+.3f} "
                f"[{er['ci_low']:+.3f}, {er['ci_high']:+.3f}] (95% t-interval over {int(er['n'])} paired seeds)"
            )
    for line in curve_lines(result):
        print(line)
    print(f"comparison: {args.out}/comparison.json  report: {write_report(args.out)}")
    return 0


def _fmt(x: object, spec: str) -> str:
    return format(x, spec) if isinstance(x, int | float) else "-"


def _probe_note(row: dict[str, Any]) -> str:
    """`` (+N probe)`` where the method's run was charged the warm start's probe before step 1, else ``""``.

    The per-step and total rollouts of the table count the RL steps only; a method that reads the probe spent
    its rollouts too (its RL budget is ``total_budget`` minus them: docs/training.md "The probe's charge").
    """
    probe = row.get("probe_rollouts_generated")
    return f" (+{probe:,.0f} probe)" if isinstance(probe, int | float) and probe > 0 else ""


def curve_lines(result: dict[str, Any]) -> list[str]:
    """The learning-curve and cost table of a comparison.json (trace_rl.metrics.curves), as printed lines."""
    info = result.get("curves") or {}
    baseline, span = info.get("baseline", "?"), info.get("auc_range") or {}
    eq = (info.get("auc_ranges") or {}).get("rollout_equivalents") or {}
    lines = [
        f"learning curves (baseline {baseline}): final = mean of the last two held-out evaluations; auc = mean "
        f"pass@1 over generated rollouts {_fmt(span.get('low'), ',.0f')}..{_fmt(span.get('high'), ',.0f')}; "
        f"reach = generated rollouts to {baseline}'s final pass@1 (same seed); auc_eq, reach_eq: the same in "
        f"rollout-equivalents (auc_eq over {_fmt(eq.get('low'), ',.0f')}..{_fmt(eq.get('high'), ',.0f')}); "
        "cost per step / total (RL steps; '+N probe': the warm start's probe rollouts charged to the method)"
    ]
    for name, row in result["methods"].items():
        seeds = row.get("seeds", "?")
        reached = f"{row.get('rollouts_to_baseline_final_reached', 0)}/{seeds} seeds"
        reached_eq = f"{row.get('rollout_equivalents_to_baseline_final_reached', 0)}/{seeds} seeds"
        lines.append(
            f"{name:18s} final={_fmt(row.get('final_accuracy'), '.3f')} auc={_fmt(row.get('auc'), '.3f')} "
            f"reach={_fmt(row.get('rollouts_to_baseline_final'), ',.0f')} ({reached}) "
            f"auc_eq={_fmt(row.get('auc_rollout_equivalents'), '.3f')} "
            f"reach_eq={_fmt(row.get('rollout_equivalents_to_baseline_final'), ',.0f')} ({reached_eq}) "
            f"rollouts={_fmt(row.get('rollouts_generated'), ',.1f')}/{_fmt(row.get('rollouts_generated_total'), ',.0f')}"
            f"{_probe_note(row)} "
            f"rollout_eq={_fmt(row.get('budget_spent'), ',.1f')}/{_fmt(row.get('budget_spent_total'), ',.0f')} "
            f"tokens={_fmt(row.get('tokens_generated'), ',.0f')}/{_fmt(row.get('tokens_generated_total'), ',.0f')} "
            f"tool_calls={_fmt(row.get('tool_calls'), ',.1f')}/{_fmt(row.get('tool_calls_total'), ',.0f')}"
        )
    for pair, rows in result.get("paired", {}).items():
        bits = []
        for key, label, spec in (
            ("final_accuracy", "final", "+.3f"),
            ("auc", "auc", "+.3f"),
            ("rollouts_to_baseline_final", "reach", "+,.0f"),
            ("auc_rollout_equivalents", "auc_eq", "+.3f"),
            ("rollout_equivalents_to_baseline_final", "reach_eq", "+,.0f"),
        ):
            d = rows.get(key)
            if d is not None:
                bits.append(
                    f"{label} {_fmt(d['mean'], spec)} [{_fmt(d['ci_low'], spec)}, {_fmt(d['ci_high'], spec)}] "
                    f"(n={int(d['n'])})"
                )
        if bits:
            lines.append(f"{pair:24s} " + "; ".join(bits) + " (paired 95% t-intervals)")
    return lines
