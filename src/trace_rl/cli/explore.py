"""`trace-rl explore --out FILE.html`: the blog's two widgets as one self-contained page.

trace-rl explore --out explore.html [--probs 0.99,0.9,0.5,0.5,0.15,0.02] [--budget 16]
"""

from __future__ import annotations

import argparse
from typing import Any

from trace_rl.cli.common import UsageError, parse_probs, user_input


def register(sub: Any) -> None:
    p = sub.add_parser(
        "explore",
        help="write an interactive page: 'eight rollouts, zero signal' and 'play the allocator'",
        description=(
            "Write a self-contained HTML page (no network at view time) with the blog's two widgets: P(mixed) "
            "of a group as the success probability and group size move, and uniform vs TRACE root allocation "
            "of a budget over editable prompt estimates (the exact solver, ported to JavaScript)."
        ),
    )
    p.add_argument("--out", required=True, metavar="FILE.html", help="where to write the page")
    p.add_argument(
        "--probs",
        default="0.99,0.9,0.5,0.5,0.15,0.02",
        help="comma-separated starting estimates (default: the blog's six prompts)",
    )
    p.add_argument("--budget", type=int, default=16, help="starting root budget (default 16)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trace_rl.explore import write_explorer

    if not args.out.lower().endswith((".html", ".htm")):
        raise UsageError(f"--out must name an .html file; got {args.out!r}")
    with user_input():  # write_explorer checks the starting budget
        page = write_explorer(args.out, parse_probs(args.probs).tolist(), args.budget)
    print(page)
    return 0
