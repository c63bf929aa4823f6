"""`trace-rl lab`: the known-truth allocation lab.

trace-rl lab claims [--json] [--seeds 10] [--steps 2] [--seed 0]
trace-rl lab plot --out DIR [--seeds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lab",
        help="known-truth simulator: check the paper's claims, plot allocations",
        description="The allocation lab: a synthetic multi-turn task family with known success probabilities.",
    )
    lab_sub = p.add_subparsers(dest="lab_command", required=True)
    c = lab_sub.add_parser(
        "claims", help="evaluate the paper's claims at equal budget, with 95% CIs over seeds"
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


def run_claims_cmd(args: argparse.Namespace) -> int:
    from trace_rl.lab.claims import run_claims

    if args.seeds < 2:
        raise ValueError(f"--seeds must be at least 2 for a confidence interval; got {args.seeds}")
    if args.steps < 1:
        raise ValueError(f"--steps must be at least 1; got {args.steps}")
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
    from trace_rl.lab.plots import write_plots

    if args.seeds < 1:
        raise ValueError(f"--seeds must be at least 1; got {args.seeds}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} exists and is not a directory")
    for path in write_plots(args.out, seeds=args.seeds):
        print(path)
    return 0
