"""The success predictor's interface and its input validation (pure: no torch here).

Every allocation decision reads a success estimate v = P(a rollout from this anchor succeeds) before sampling.
TRACE (arXiv 2606.11119) uses ONE shared predictor for prompts and prefixes, trained online with mean squared
error on the bottom-up targets of the trees it helped build.

Cold start (ours; the paper does not say): before its first update a predictor returns its prior (0.5) for
every text and reports ``is_warm == False``; the trainer then allocates uniformly over the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.capabilities import Capability

FloatArray = npt.NDArray[np.float64]

#: Success estimate of a predictor that has never been updated (and of a fresh value head).
DEFAULT_PRIOR = 0.5
#: Predictions are clipped to [EPS, 1 - EPS] so that they are strictly inside (0, 1).
DEFAULT_EPS = 1e-4


@runtime_checkable
class SuccessPredictor(Protocol):
    """A model of P(success | serialized anchor), shared by prompts and prefixes.

    Attributes:
        name: backbone name ("tiny", "minilm" or the model folder).
        prior: the estimate returned for every text before the first update.
        max_chars: character budget for :func:`trace_rl.predictor.serialize_anchor` matching the backbone: every
            text the trainer scores or trains this predictor on is serialized at this budget.
        capabilities: what it can do beyond this protocol, a frozenset of
            :class:`~trace_rl.predictor.capabilities.Capability` (``NO_CAPABILITIES`` for none), each promising
            the members of its protocol (`trace_rl.predictor.capabilities`; checked by ``check_capabilities``
            when the predictor is built or handed to the trainer).
    """

    name: str
    prior: float
    max_chars: int
    capabilities: frozenset[Capability]

    @property
    def is_warm(self) -> bool:
        """False until the first :meth:`update`; while False, estimates equal ``prior``."""
        ...

    def predict(self, texts: Sequence[str]) -> FloatArray:
        """Success estimates, float64 (n,), strictly inside (0, 1). Raises ValueError on non-string input."""
        ...

    def update(
        self, texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        """One optimizer step on weighted MSE  sum_i w_i (p_i - y_i)^2 / sum_i w_i; returns training metrics."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer state, update count."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state produced by :meth:`state_dict` of a predictor with the same backbone."""
        ...


def validate_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list of strings.

    Raises:
        ValueError: ``texts`` is a single string (a common slip: it would be scored character by character),
            is not a sequence, or holds a non-string.
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError("texts must be a sequence of strings, not a single string; wrap it in a list")
    try:
        out = list(texts)
    except TypeError:
        raise ValueError(f"texts must be a sequence of strings; got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a string; got {type(t).__name__}")
    return out


def validate_update(
    texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
) -> tuple[list[str], FloatArray, FloatArray]:
    """Validate the arguments of :meth:`SuccessPredictor.update`.

    Returns:
        (texts as a list, targets float64 (n,), weights float64 (n,), ones when None).

    Raises:
        ValueError: empty batch; lengths differ; targets not finite or outside [0, 1]; weights not finite,
            negative, or summing to zero.
    """
    items = validate_texts(texts)
    n = len(items)
    if n == 0:
        raise ValueError("update needs at least one text")
    y = np.asarray(targets, dtype=np.float64)
    if y.shape != (n,):
        raise ValueError(f"targets must have shape ({n},) to match texts; got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("targets contain NaN or infinity")
    if ((y < 0.0) | (y > 1.0)).any():
        raise ValueError(f"targets must be success rates in [0, 1]; got {y[(y < 0.0) | (y > 1.0)][0]!r}")
    if weights is None:
        w = np.ones(n, dtype=np.float64)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({n},) to match texts; got {w.shape}")
        if not np.all(np.isfinite(w)) or (w < 0.0).any():
            raise ValueError("weights must be finite and non-negative")
        if not w.sum() > 0.0:
            raise ValueError("weights must have a positive sum")
    return items, y, w


def posterior_mean(
    prior: npt.ArrayLike, successes: npt.ArrayLike, trials: npt.ArrayLike, strength: npt.ArrayLike
) -> FloatArray:
    """Beta posterior mean of a success rate: ``(kappa p + s) / (kappa + n)``.

    Prior Beta(kappa p, kappa (1 - p)) with mean p and strength kappa (pseudo-trials), after s successes in n
    Bernoulli trials. kappa = inf returns p; n = 0 returns p.

    Args:
        prior: p, shape (k,) in [0, 1]. successes, trials: s <= n, shape (k,), n >= 0. strength: kappa >= 0.

    Returns:
        float64 (k,) in [0, 1]. Where kappa = 0 and n = 0 the prior is returned.
    """
    p = np.asarray(prior, dtype=np.float64)
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    k = np.broadcast_to(np.asarray(strength, dtype=np.float64), p.shape)
    out = p.copy()
    use = (n > 0) & np.isfinite(k)
    out[use] = (k[use] * p[use] + s[use]) / (k[use] + n[use])
    return np.clip(out, 0.0, 1.0)
