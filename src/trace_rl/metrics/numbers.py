"""What counts as a number in a logged record: the one finite-number test of the metrics and the report.

    number(x)            -> 4.0 / nan        a logged value as a float; NaN for a missing or non-numeric one
    is_finite_number(x)  -> True / False     an int or float (not a bool) that is neither NaN nor infinite
    finite_or_none(x)    -> 4.0 / None       a number for strict JSON: None stands for NaN and infinities

A bool is never a number here (JSON's ``true`` is not a count), nor a string that looks like one; infinities pass
`number` unchanged (a sum over them stays infinite) but fail `is_finite_number`. Pure: the standard library only.
"""

from __future__ import annotations

import math

__all__ = ["finite_or_none", "is_finite_number", "number"]


def number(x: object) -> float:
    """A logged value as a float: ``float(x)`` for an int or a float (not a bool), NaN for anything else (None,
    a missing field, a string, a bool)."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        return float(x)
    return math.nan


def is_finite_number(x: object) -> bool:
    """Whether ``x`` is an int or a float (not a bool) and finite (neither NaN nor +-inf)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def finite_or_none(value: float) -> float | None:
    """A number for JSON: None stands for NaN/inf (strict JSON has no NaN; None reads as "not defined")."""
    return float(value) if math.isfinite(float(value)) else None
