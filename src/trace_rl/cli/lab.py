"""`trace-rl lab`: the known-truth allocation lab.

trace-rl lab claims [--json] [--seeds 10] [--steps 2] [--seed 0]
trace-rl lab plot --out DIR [--seeds 4]
trace-rl lab predictor [--json] [--steps 20] [--seeds 6] [--seed 0] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from trace_rl.cli.common import UsageError


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lab",
        help="known-truth simulator: check the paper's claims, plot allocations",
        description="The allocation lab: a synthetic multi-turn task family with known success probabilities.",
    )
    lab_sub = p.add_subparsers(dest="lab_command", required=True)
    c = lab_sub.add_parser(
        "claims", help="evaluate the paper's claims at equal budget, with 95%% CIs over seeds"
    )
    c.add_argument("--json", action="store_true", help="print a JSON list of {id, statement, measured, ...}")
    c.add_argument("--seeds", type=int, default=10, help="seeds for the confidence intervals (default 10)")
    c.add_argument("--steps", type=int, default=2, help="candidate pools per seed (default 2)")
    c.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    c.set_defaults(func=run_claims_cmd)
    pl = lab_sub.add_parser("plot", help="write PNGs: effective ratio vs budget, allocation, replay depths")
    pl.add_argument("--out", required=True, help="output directory (created if missing)")
    pl.add_argument("--seeds", type=int, default=4, help="pools averaged per point (default 4)")
    pl.set_defaults(func=run_plot_cmd)
    lp = lab_sub.add_parser(
        "predictor",
        help="train the tiny learned predictor online on the lab; error by depth and TRACE's ratio with it",
        description="Trains build_predictor('tiny') online for --steps TRACE steps (64x2), reports its error by "
        "depth on held-out lab trees next to the constant 0.5 and the oracle, then TRACE's effective ratio at "
        "128x2 with it (frozen) vs the oracle and TreePO on paired pools (docs/predictor.md).",
    )
    lp.add_argument("--json", action="store_true", help="print one JSON object")
    lp.add_argument("--steps", type=int, default=20, help="online training steps at 64x2 (default 20)")
    lp.add_argument(
        "--seeds", type=int, default=6, help="pools of the effective-ratio comparison (default 6)"
    )
    lp.add_argument(
        "--eval-prompts", type=int, default=48, help="held-out prompts, 4 rollouts each (default 48)"
    )
    lp.add_argument("--seed", type=int, default=0, help="seed of training pools and the model (default 0)")
    lp.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    lp.set_defaults(func=run_predictor_cmd)


def run_claims_cmd(args: argparse.Namespace) -> int:
    """`trace-rl lab claims`: evaluate the paper's claims on the lab and print a table or JSON."""
    from trace_rl.lab.claims import run_claims

    if args.seeds < 2:
        raise UsageError(f"--seeds must be at least 2 for a confidence interval; got {args.seeds}")
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1; got {args.steps}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0; got {args.seed}")
    start = time.perf_counter()
    results = run_claims(seeds=args.seeds, steps=args.steps, base_seed=args.seed)
    elapsed = time.perf_counter() - start
    if args.json:
        print(json.dumps([r.to_dict() for r in results]))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"TRACE claims on the lab ({args.seeds} seeds x {args.steps} pools, 95% CIs)", show_lines=True
    )
    table.add_column("claim", overflow="fold")
    table.add_column("holds", justify="center")
    table.add_column("measured", overflow="fold")
    table.add_column("expected", overflow="fold")
    for r in results:
        table.add_row(r.id, "yes" if r.holds else "NO", r.summary, r.expected)
    console = Console(width=160)
    console.print(table)
    held = sum(r.holds for r in results)
    console.print(f"{held}/{len(results)} claims hold; {elapsed:.1f} s")
    return 0


def run_plot_cmd(args: argparse.Namespace) -> int:
    """`trace-rl lab plot`: write the lab's PNG figures to --out."""
    from trace_rl.lab.plots import write_plots

    if args.seeds < 1:
        raise UsageError(f"--seeds must be at least 1; got {args.seeds}")
    from trace_rl.cli.common import output_folder

    for path in write_plots(output_folder(args.out), seeds=args.seeds):
        print(path)
    return 0


def run_predictor_cmd(args: argparse.Namespace) -> int:
    """`trace-rl lab predictor`: train the tiny learned predictor on the lab and report it."""
    if args.steps < 1:
        raise UsageError(f"--steps must be at least 1; got {args.steps}")
    if args.seeds < 2:
        raise UsageError(f"--seeds must be at least 2 for a confidence interval; got {args.seeds}")
    if args.eval_prompts < 2:
        raise UsageError(f"--eval-prompts must be at least 2; got {args.eval_prompts}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0; got {args.seed}")
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1; got {args.threads}")
    import torch

    from trace_rl.cli.lab_learned import (
        ConstantPredictor,
        LearnedLabPredictor,
        depth_rows,
        depth_table,
        ratio_comparison,
        train_on_lab,
    )
    from trace_rl.lab import OraclePredictor
    from trace_rl.predictor import build_predictor

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = build_predictor("tiny", seed=args.seed)
    log = train_on_lab(model, steps=args.steps, method="trace", shape="64x2", seed=args.seed)
    trained = time.perf_counter()
    learned = LearnedLabPredictor(model)
    table = depth_table(
        {"learned": learned, "constant": ConstantPredictor(0.5), "oracle": OraclePredictor()},
        prompts=args.eval_prompts,
        rollouts=4,
        seed=1000 + args.seed,
    )
    rows = depth_rows(table)
    comparison = ratio_comparison(learned, seeds=args.seeds, shape="128x2", base_seed=500 + args.seed)
    summary = comparison.summary()
    elapsed = time.perf_counter() - start
    updates = int(sum(m["predictor/updates"] for m in log))
    report: dict[str, Any] = {
        "training": {
            "steps": args.steps,
            "method": "trace",
            "shape": "64x2",
            "updates": updates,
            "effective_ratio_by_step": [m["effective_ratio"] for m in log],
            "seconds": trained - start,
        },
        "error_by_depth": rows,
        "effective_ratio": summary,
        "seconds": elapsed,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    t = Table(
        title=f"tiny learned predictor after {args.steps} TRACE steps ({updates} updates): "
        f"MSE on {args.eval_prompts} held-out prompts x 4 rollouts",
    )
    for col in ("depth", "nodes", "learned vs target", "0.5 vs target", "oracle vs target"):
        t.add_column(col, justify="right")
    for col in ("learned vs truth", "0.5 vs truth", "Spearman learned"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            r["depth"],
            str(r["count"]),
            *(f"{r[k + '/mse_target']:.4f}" for k in ("learned", "constant", "oracle")),
            *(f"{r[k + '/mse_truth']:.4f}" for k in ("learned", "constant")),
            f"{r['learned/spearman_target']:.3f}",
        )
    console.print(t)
    er = Table(title=f"effective ratio at 128x2, {summary['seeds']} paired pools (95% CIs); learned frozen")
    er.add_column("arm")
    er.add_column("effective ratio", justify="right")
    er.add_column("share of TRACE/oracle", justify="right")
    for label in comparison.ratio:
        ci, share = summary[label], summary[f"{label}/share_of_oracle"]
        er.add_row(
            label,
            f"{ci['mean']:.3f} [{ci['ci_low']:.3f}, {ci['ci_high']:.3f}]",
            f"{share['mean']:.3f} [{share['ci_low']:.3f}, {share['ci_high']:.3f}]",
        )
    console.print(er)
    d = summary["trace/learned-treepo"]
    console.print(
        f"trace/learned - treepo: {d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]; total {elapsed:.1f} s"
    )
    return 0
