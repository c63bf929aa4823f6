"""Entry point of the `trace-rl` command: a thin dispatcher over subcommand modules."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from trace_rl import __version__


class UsageError(Exception):
    """Bad user input: printed as one line, exit status 2, no traceback."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (``trace-rl CMD: error: ...``), not a usage block, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def output_folder(path: str, flag: str = "--out") -> str:
    """``path`` when it can be an output folder (a folder, or missing below a folder), else UsageError."""
    current = os.path.abspath(path)
    while not os.path.exists(current):
        current = os.path.dirname(current)
    if not os.path.isdir(current):
        what = "it is a file" if current == os.path.abspath(path) else f"it lies under the file {current}"
        raise UsageError(
            f"{flag} {path} is not a directory ({what}); {flag} names a folder, created when missing"
        )
    return path


def build_parser() -> argparse.ArgumentParser:
    """The `trace-rl` parser with every subcommand registered."""
    parser = _Parser(prog="trace-rl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"trace-rl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    from trace_rl.cli import allocate, compare, env_check, explore, generate, lab, report, serve, sft, train

    for module in (train, compare, report, allocate, explore, lab, env_check, generate, sft, serve):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError) as exc:
        if os.environ.get("TRACE_RL_DEBUG") and not isinstance(exc, UsageError):
            raise  # the full traceback, for an error raised deep inside a run
        print(f"trace-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unwritable output path, missing folder, full disk: one line, no traceback
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"trace-rl {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # `python -m trace_rl.cli.main`: run the imported module's main, so that the subcommands' UsageError (raised
    # from trace_rl.cli.main) is the class caught here, not a second copy defined in __main__
    from trace_rl.cli.main import main as _main

    sys.exit(_main())
