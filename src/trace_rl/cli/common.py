"""What the `trace-rl` subcommands share: the usage error, the user-input guard, the output-folder check and
the ``--probs`` parser.

Subcommands import these from here, never from `trace_rl.cli.main` (which imports the subcommands), so the CLI
has no import cycle and `python -m trace_rl.cli.main` sees one `UsageError` class."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from trace_rl.errors import UserError

__all__ = ["UsageError", "output_folder", "parse_probs", "user_input"]


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


def parse_probs(text: str) -> np.ndarray:
    """The probabilities in ``--probs`` (comma-separated, each in [0, 1]), else UsageError."""
    try:
        values = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"--probs must be comma-separated numbers; got {text!r}") from None
    if not values:
        raise UsageError("--probs needs at least one probability")
    arr = np.asarray(values)
    if np.isnan(arr).any() or (arr < 0).any() or (arr > 1).any():
        raise UsageError(f"--probs must be probabilities in [0, 1]; got {text!r}")
    return arr
