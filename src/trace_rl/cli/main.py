"""Entry point of the `trace-rl` command: a thin dispatcher over subcommand modules."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from trace_rl import __version__
from trace_rl.cli.common import UsageError, output_folder, user_input
from trace_rl.errors import REPORT_BUG, UserError

__all__ = ["INTERNAL_ERROR", "UsageError", "build_parser", "main", "output_folder", "user_input"]

INTERNAL_ERROR = 1
"""Exit status of a command that stopped on an unexpected exception (a bug); user errors exit with 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (``trace-rl CMD: error: ...``), not a usage block, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `trace-rl` parser with every subcommand registered."""
    parser = _Parser(prog="trace-rl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"trace-rl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from trace_rl.cli import (
        allocate,
        compare,
        env_check,
        explore,
        generate,
        lab,
        regime,
        report,
        serve,
        sft,
        train,
        verl_check,
    )

    for module in (
        train,
        compare,
        report,
        allocate,
        explore,
        lab,
        regime,
        env_check,
        generate,
        sft,
        serve,
        verl_check,
    ):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. The project's user-facing errors (`trace_rl.errors.UserError`: config, usage, data,
    warm start, run folder) and OS errors (an unwritable path, a full disk) print one line and return 2; any other
    exception is a bug: one line saying so and where to report it, then its traceback, and status 1
    (`INTERNAL_ERROR`). TRACE_RL_DEBUG=1 re-raises user errors too, with their tracebacks."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        if os.environ.get("TRACE_RL_DEBUG") and not isinstance(exc, UsageError):
            raise  # the full traceback, for an error raised deep inside a run
        print(f"trace-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unwritable output path, missing folder, full disk: one line, no traceback
        if os.environ.get("TRACE_RL_DEBUG"):
            raise
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"trace-rl {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exception:
        print(
            f"trace-rl {args.command}: internal error: {REPORT_BUG} (trace-rl {__version__})", file=sys.stderr
        )
        traceback.print_exc()
        return INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
