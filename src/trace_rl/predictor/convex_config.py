"""The convex predictor's configuration: :class:`ConvexConfig` (its hyper-parameters, validated) and the inverse L2
strength each convex predictor name is built with (:data:`DEFAULT_C`, kept beside the names in
`trace_rl.predictor.names`)."""

from __future__ import annotations

from dataclasses import dataclass

from trace_rl.predictor.base import DEFAULT_EPS, DEFAULT_PRIOR
from trace_rl.predictor.names import CONVEX_FEATURES, DEFAULT_C  # noqa: F401 (DEFAULT_C re-exported)

#: Feature sets of :class:`ConvexConfig` (column blocks in this order: n-grams, MiniLM, policy state, group).
FEATURE_SETS = tuple(CONVEX_FEATURES.values())


@dataclass(frozen=True)
class ConvexConfig:
    """Hyper-parameters of :class:`~trace_rl.predictor.convex.ConvexSuccessPredictor`.

    Attributes:
        features: "ngram", "minilm", "ngram+minilm" (concatenated), or with the policy's hidden state at the
            anchor (:class:`~trace_rl.predictor.policy_state.PolicyStateEncoder`, attached with
            :meth:`~trace_rl.predictor.convex.ConvexSuccessPredictor.attach_state`): "state", "ngram+minilm+state"; or with the sibling
            consensus of the prefix's tree (:func:`~trace_rl.predictor.consensus.sibling_consensus`, registered
            with :meth:`~trace_rl.predictor.convex.ConvexSuccessPredictor.register_group`): "ngram+minilm+group", or its columns without the
            outcomes of the prefix's own environment state (:func:`~trace_rl.predictor.consensus.prior_columns`,
            the prior that ``budget.state_evidence`` updates with them): "ngram+minilm+group-prior".
        ngram_range: character n-gram lengths (inclusive).
        n_features: hashing dimension of the n-gram counts.
        c: inverse L2 strength of the logistic head (sklearn's ``C``); larger = weaker regularisation.
        max_iter: L-BFGS-B iterations per refit (warm-started from the previous fit; on a demo-shaped store with
            the MiniLM block, 100 leave estimates within about 0.015 of the converged fit: docs/benchmarks.md).
        kappa: prior strength of the history posterior; None = fitted per level, 0 = history off.
        kappa_default: prior strength used while a level has too few multi-trial texts to fit it.
        kappa_min_texts: multi-trial texts a level needs before its kappa is fitted.
        history_window: updates (policy versions) whose outcomes are kept; None keeps every outcome (refit time
            and memory then grow with the run).
        history_decay: weight multiplier per version of age inside the window, in (0, 1] (1: a hard window).
        max_chars: serialization budget for :func:`trace_rl.predictor.serialize_anchor`.
        prior: estimate returned before the first update.
        eps: predictions are clipped to [eps, 1 - eps].
        device: torch device of the frozen encoder (None = cuda when available).
        embed_batch: texts per encoder forward pass.
    """

    features: str = "ngram"
    ngram_range: tuple[int, int] = (1, 3)
    n_features: int = 2**14
    c: float = 1.0
    max_iter: int = 100
    kappa: float | None = None
    kappa_default: float = 4.0
    kappa_min_texts: int = 20
    history_window: int | None = 20
    history_decay: float = 1.0
    max_chars: int = 1024
    prior: float = DEFAULT_PRIOR
    eps: float = DEFAULT_EPS
    device: str | None = None
    embed_batch: int = 64

    def __post_init__(self) -> None:
        lo, hi = self.ngram_range
        checks = [
            (
                self.features in FEATURE_SETS,
                f"features must be one of {', '.join(FEATURE_SETS)}",
            ),
            (1 <= lo <= hi <= 8, "ngram_range must satisfy 1 <= low <= high <= 8"),
            (self.n_features >= 16, "n_features must be >= 16"),
            (self.c > 0, "c must be > 0"),
            (self.max_iter >= 1, "max_iter must be >= 1"),
            (self.kappa is None or self.kappa >= 0, "kappa must be >= 0 (or None to fit it)"),
            (self.kappa_default > 0, "kappa_default must be > 0"),
            (self.kappa_min_texts >= 2, "kappa_min_texts must be >= 2"),
            (
                self.history_window is None or self.history_window >= 1,
                "history_window must be >= 1 (or None to keep every outcome)",
            ),
            (0 < self.history_decay <= 1, "history_decay must be in (0, 1]"),
            (0 < self.eps < 0.5, "eps must be in (0, 0.5)"),
            (self.eps <= self.prior <= 1 - self.eps, "prior must be in [eps, 1 - eps]"),
            (self.embed_batch >= 1, "embed_batch must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"ConvexConfig: {message}")
