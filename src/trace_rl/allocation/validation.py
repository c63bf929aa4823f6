"""Input checks shared by allocation's objectives and solvers, and the array aliases they return.

One helper per check: each turns an argument into the array or number the solvers use, or raises ValueError
naming the argument. `objectives.py`, `roots.py`, `prefixes.py`, `contrast.py`, `knapsack.py` and `strategies.py`
all validate through these, so the same argument is checked (and reported) the same way everywhere.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def as_probability(x: npt.ArrayLike, name: str) -> FloatArray:
    """``x`` as a float64 array of any shape with values in [0, 1] (no NaN, no booleans)."""
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be an array of probabilities in [0, 1] (got a ragged or unreadable value)"
        ) from None
    if raw.dtype.kind == "b":
        raise ValueError(f"{name} must be numbers in [0, 1], not booleans")
    if raw.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be real numbers in [0, 1]; got values of type {raw.dtype}")
    arr = raw.astype(np.float64)
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN; every {name} must be a probability in [0, 1]")
    if ((arr < 0.0) | (arr > 1.0)).any():
        bad = arr[(arr < 0.0) | (arr > 1.0)].ravel()[0]
        raise ValueError(f"{name} must lie in [0, 1]; got {bad!r}")
    return arr


def as_probability_vector(x: npt.ArrayLike, name: str) -> FloatArray:
    """`as_probability`, and 1-D."""
    arr = as_probability(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of probabilities; got shape {arr.shape}")
    return arr


def as_count(x: npt.ArrayLike, name: str) -> IntArray:
    """``x`` as an int64 array of non-negative whole numbers (whole floats accepted)."""
    arr = np.asarray(x)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must be whole numbers of rollouts; got {arr.ravel()[:5]!r}")
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integer counts; got dtype {arr.dtype}")
    out = arr.astype(np.int64)
    if (out < 0).any():
        raise ValueError(f"{name} must be non-negative; got {int(out.min())}")
    return out


def as_int(x: object, name: str, *, minimum: int = 0) -> int:
    """A scalar whole number >= ``minimum`` (whole floats accepted, booleans not) as a Python int."""
    if isinstance(x, bool) or not isinstance(x, int | np.integer | float | np.floating):
        raise ValueError(f"{name} must be an integer; got {x!r}")
    if isinstance(x, float | np.floating) and (not math.isfinite(float(x)) or float(x) != int(x)):
        raise ValueError(f"{name} must be a whole number; got {x!r}")
    value = int(x)
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {value}")
    return value


def as_sibling(sibling: npt.ArrayLike | None, j: int) -> npt.NDArray[np.bool_]:
    """The sibling mask: a bool array of shape (j,); None means every anchor has a sibling group."""
    if sibling is None:
        return np.ones(j, dtype=np.bool_)
    arr = np.asarray(sibling)
    if arr.dtype.kind != "b" or arr.shape != (j,):
        raise ValueError(f"sibling must be a boolean array of shape ({j},); got {arr.dtype} {arr.shape}")
    return arr.astype(np.bool_)


def as_weight(weight: float) -> float:
    """The sibling weight: a finite real number >= 0 (booleans not accepted) as a float."""
    if isinstance(weight, bool) or not isinstance(weight, int | float | np.integer | np.floating):
        raise ValueError(f"weight must be a number >= 0; got {weight!r}")
    w = float(weight)
    if not np.isfinite(w) or w < 0:
        raise ValueError(f"weight must be finite and >= 0; got {weight!r}")
    return w


def as_caps(max_per_prefix: npt.ArrayLike | None, j: int, default: int) -> IntArray:
    """Replay caps per anchor, shape (j,), each at most ``default``; None means ``default`` everywhere."""
    if max_per_prefix is None:
        return np.full(j, default, dtype=np.int64)
    arr = np.asarray(max_per_prefix)
    if arr.ndim == 0:
        return np.full(j, min(as_int(arr.item(), "max_per_prefix"), default), dtype=np.int64)
    if arr.shape != (j,):
        raise ValueError(f"max_per_prefix must be a scalar or have shape ({j},); got shape {arr.shape}")
    caps = np.array([as_int(c, "max_per_prefix") for c in arr.tolist()], dtype=np.int64)
    return np.minimum(caps, default)


def as_costs(cost: npt.ArrayLike | None, j: int) -> IntArray:
    """Integer cost of one replay per anchor, shape (j,), each >= 1; a scalar is broadcast; None means 1."""
    if cost is None:
        return np.ones(j, dtype=np.int64)
    c_arr = np.asarray(cost)
    if c_arr.ndim == 0:
        c_arr = np.full(j, c_arr.item())
    if c_arr.shape != (j,):
        raise ValueError(f"cost must be a scalar or have shape ({j},); got shape {c_arr.shape}")
    return np.array([as_int(c, "cost", minimum=1) for c in c_arr.tolist()], dtype=np.int64)
