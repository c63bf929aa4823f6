"""Entry point of the `trace-rl` command: a thin dispatcher over subcommand modules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trace_rl import __version__


class UsageError(Exception):
    """Bad user input: printed as one line, exit status 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    """The `trace-rl` parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="trace-rl", description=__doc__)
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
        print(f"trace-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unwritable output path, missing folder, full disk: one line, no traceback
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"trace-rl {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
