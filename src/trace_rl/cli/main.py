"""Entry point of the `trace-rl` command: a thin dispatcher over subcommand modules."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from trace_rl import __version__
from trace_rl.errors import REPORT_BUG, UserError

INTERNAL_ERROR = 1
"""Exit status of a command that stopped on an unexpected exception (a bug); user errors exit with 2."""


class UsageError(UserError):
    """Bad user input: printed as one line, exit status 2, no traceback."""


@contextmanager
def user_input(prefix: str = "") -> Iterator[None]:
    """Inside the block, a ValueError is a check of the user's own arguments failing: re-raise it as a UsageError
    (one line, exit status 2). Wrap only calls whose ValueErrors can come from those arguments, so that a
    ValueError anywhere else stays a bug with its traceback."""
    try:
        yield
    except UserError:
        raise
    except ValueError as exc:
        raise UsageError(f"{prefix}{exc}") from None


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
    # `python -m trace_rl.cli.main`: run the imported module's main, so that the subcommands' UsageError (raised
    # from trace_rl.cli.main) is the class caught here, not a second copy defined in __main__
    from trace_rl.cli.main import main as _main

    sys.exit(_main())
