"""`trace-rl report DIR`: DIR/report.html with PNG plots, from a run folder or a compare folder."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("report", help="write DIR/report.html from a run or compare folder")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trace_rl.metrics.report import write_report

    print(write_report(args.dir))
    return 0
