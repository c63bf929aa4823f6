"""The project's user-facing errors: what `trace-rl` prints as one line (exit status 2), never a bug.

Everything else that escapes a command (an assertion, a shape error deep in a solver, a KeyError) is a bug: the
command prints one line saying so and where to report it, then the traceback (`trace_rl.cli.main`). Each class
subclasses ValueError, so code that catches ValueError keeps working.

- `UserError`: bad input in general (a run folder that holds another run, an unknown policy, a CLI argument).
- `DataError`: task data or an environment that cannot be loaded as given (a malformed JSONL row, a missing corpus,
  an unknown environment or split, a held-out filter that leaves too few tasks).
- `trace_rl.train.config.ConfigError`, `trace_rl.train.warm_start.WarmStartError` and
  `trace_rl.cli.common.UsageError` subclass `UserError`.
"""

from __future__ import annotations

REPORT_BUG = (
    "this is a bug in trace-rl, not a problem with your input: please report it on the trace-rl issue tracker "
    "with the command you ran and the traceback below"
)
"""What `trace-rl` prints before an unexpected exception's traceback (after ``trace-rl CMD: internal error:``)."""


class UserError(ValueError):
    """A problem with what the user gave, explained in one line that says what to change."""


class DataError(UserError):
    """Task data or an environment that cannot be loaded as given (one line naming the file, row or key)."""


__all__ = ["REPORT_BUG", "DataError", "UserError"]
