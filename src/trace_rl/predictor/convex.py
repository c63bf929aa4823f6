"""A success predictor that learns from a few hundred examples: fixed text features and a convex head.

Why (docs/predictor.md#the-convex-predictor): a neural predictor trained online with a handful of AdamW steps per
RL step barely learns in a 30-step run (DEMO_HEADROOM.md: prompt-level Spearman about 0.3 online, 0.65-0.77 even
offline to convergence), while the difficulty of a prompt is often readable from surface features of its text.
This predictor therefore

1. maps each text to fixed features: character n-gram counts (``HashingVectorizer``; nothing to train, nothing to
   go stale) and, optionally, the mean-pooled embedding of a frozen pretrained encoder (all-MiniLM-L6-v2) of
   the text's prompt block, cached per prompt (a prefix shares its prompt's embedding; its turns reach the head
   through the n-grams);
2. keeps the (text, successes, trials) of the last ``history_window`` updates (policy versions: the online
   trainer calls ``update`` once per RL step), one batch per update, optionally down-weighted by
   ``history_decay`` per version of age; older outcomes are forgotten, so refit time and memory stay bounded;
3. refits a binomial logistic regression (L2-regularised, convex: one global optimum, no schedule to tune;
   :func:`fit_binomial_logistic`, scipy L-BFGS-B warm-started from the previous fit) on the kept outcomes at every
   :meth:`update`; a target y with weight w counts as w * y successes out of w trials, so the fit is the
   maximum-likelihood (calibrated) estimate of P(success | features);
4. for texts with kept outcomes, combines a prior with the text's own outcome history through a Beta posterior
   ``v = (kappa * p + s) / (kappa + n)`` (Bayes with a Beta(kappa p, kappa (1 - p)) prior). The prior p of a stored
   text is held out: the head's estimate just before the update that first stored the text (a head that never saw
   an outcome of it, so no outcome is counted twice); an unseen text's prior is the current head's estimate, the
   same kind of estimate. The prior strength ``kappa`` is fitted per level (prompt / prefix) by maximum
   beta-binomial likelihood on the stored texts with at least two trials, against those same held-out priors.

It implements the :class:`~trace_rl.predictor.base.SuccessPredictor` protocol; ``update`` is "add these
examples and refit" rather than one gradient step (the online trainer calls it once per RL step with that step's
new nodes, see :class:`~trace_rl.predictor.online.OnlineTrainer`).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.base import (
    DEFAULT_EPS,
    DEFAULT_PRIOR,
    posterior_mean,
    validate_texts,
    validate_update,
)
from trace_rl.predictor.consensus import GROUP_FEATURES, prior_columns
from trace_rl.predictor.names import (  # noqa: F401 (re-exported)
    CONVEX_FEATURES,
    CONVEX_NAMES,
    GROUP_NAMES,
    STATE_NAMES,
    reads_state_outcomes,
    uses_group_prior,
)

FloatArray = npt.NDArray[np.float64]
STATE_FORMAT = 2
#: Sibling-consensus rows a "group" predictor keeps registered (one per prefix text it may still score or train on).
GROUP_CAPACITY = 200_000
#: Grid of Beta prior strengths searched when fitting kappa (log-spaced, 0.1 .. 1000).
KAPPA_GRID = np.logspace(-1, 3, 41)
#: Feature sets of :class:`ConvexConfig` (column blocks in this order: n-grams, MiniLM, policy state, group).
FEATURE_SETS = tuple(CONVEX_FEATURES.values())
#: serialize_anchor marks every turn of a prefix with "[TURN t]" (or says how many it omitted).
_TURN_MARKS = ("\n[TURN ", " EARLIER TURNS OMITTED]\n")


@dataclass(frozen=True)
class ConvexConfig:
    """Hyper-parameters of :class:`ConvexSuccessPredictor`.

    Attributes:
        features: "ngram", "minilm", "ngram+minilm" (concatenated), or with the policy's hidden state at the
            anchor (:class:`~trace_rl.predictor.policy_state.PolicyStateEncoder`, attached with
            :meth:`ConvexSuccessPredictor.attach_state`): "state", "ngram+minilm+state"; or with the sibling
            consensus of the prefix's tree (:func:`~trace_rl.predictor.consensus.sibling_consensus`, registered
            with :meth:`ConvexSuccessPredictor.register_group`): "ngram+minilm+group", or its columns without the
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


def fit_prior_strength(
    prior: npt.ArrayLike, successes: npt.ArrayLike, trials: npt.ArrayLike, grid: npt.ArrayLike = KAPPA_GRID
) -> float:
    """Maximum beta-binomial likelihood prior strength kappa over a grid.

    ``log L(kappa) = sum_i log B(s_i + kappa p_i, n_i - s_i + kappa (1 - p_i)) - log B(kappa p_i, kappa (1 - p_i))``
    (the binomial coefficient does not depend on kappa). Only texts with n_i >= 2 carry information about kappa
    (one Bernoulli trial identifies the mean only); fractional counts (averaged targets) are allowed.

    Returns:
        The grid value with the largest likelihood (the largest grid value when no text has n >= 2).
    """
    from scipy.special import betaln

    p = np.clip(np.asarray(prior, dtype=np.float64), 1e-4, 1 - 1e-4)
    s = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    keep = n >= 2
    kappas = np.asarray(grid, dtype=np.float64)
    if not keep.any():
        return float(kappas[-1])
    p, s, n = p[keep], s[keep], n[keep]
    a = kappas[:, None] * p[None, :]
    b = kappas[:, None] * (1 - p[None, :])
    ll = (betaln(s[None, :] + a, (n - s)[None, :] + b) - betaln(a, b)).sum(axis=1)
    return float(kappas[int(np.argmax(ll))])


def fit_binomial_logistic(
    x: Any,
    successes: FloatArray,
    trials: FloatArray,
    c: float,
    *,
    init: tuple[FloatArray, float] | None = None,
    max_iter: int = 200,
) -> tuple[FloatArray, float]:
    """L2-regularised binomial logistic regression on counts (convex; scipy L-BFGS-B, one row per text).

    Minimises  c * sum_i [n_i log(1 + e^{z_i}) - s_i z_i] + ||beta||^2 / 2,  z = x beta + b0 (intercept not
    penalised): the objective of scikit-learn's ``LogisticRegression(C=c)`` on rows duplicated as s_i
    successes and n_i - s_i failures, at half the cost (no duplicated rows).

    Three things keep a refit cheap without changing its optimum (docs/benchmarks.md: 3.2x less CPU for
    ``ngram+minilm``): a column without a stored entry has gradient ``beta_j`` only, so its exact optimum is 0 and
    L-BFGS-B runs on the other columns (hashed n-gram counts use a few thousand of their 16,384 columns); ``x`` may
    come as column blocks, each multiplied in its own format (sparse n-gram counts, a dense embedding: a dense block
    stored as sparse costs about 10x per product); and the search runs in centred, Jacobi-scaled coordinates (an
    exact change of variables, see the code), where a capped number of iterations lands about 10x closer to the
    optimum.

    Args:
        x: (N, F) features: a scipy sparse matrix, a dense array, or a tuple of such blocks (N, F_k) side by side
            (F = sum F_k, columns in block order). successes, trials: (N,) weighted counts, 0 <= s <= n.
        c: inverse regularisation strength (> 0). init: (beta (F,), b0) to start from (warm start).

    Returns:
        (beta float64 (F,), b0); 0 in every column without a stored entry.
    """
    from scipy import sparse
    from scipy.optimize import minimize

    blocks: list[Any] = []  # (global column ids, x restricted to them, its transpose, row-major)
    offset = 0
    for block in x if isinstance(x, tuple) else (x,):
        if sparse.issparse(block):
            xb = sparse.csr_matrix(block, dtype=np.float64)
            cols = np.flatnonzero(xb.getnnz(axis=0))
            xa = xb[:, cols]
            xat = xa.T.tocsr()
        else:
            arr = np.asarray(block, dtype=np.float64)
            cols = np.flatnonzero(np.any(arr != 0, axis=0))
            xa = np.ascontiguousarray(arr[:, cols])
            xat = np.ascontiguousarray(xa.T)
        blocks.append((offset + cols, xa, xat))
        offset += block.shape[1]
    active = np.concatenate([b[0] for b in blocks])
    bounds = np.cumsum([0] + [len(b[0]) for b in blocks])
    n_total = max(float(np.sum(trials)), 1e-12)
    # the same objective divided by c * sum(n) (same optimum, gradients of order 1: the scaling scikit-learn uses)
    scale = 1.0 / n_total
    ridge = scale / c
    # An exact change of variables that L-BFGS-B converges in far fewer iterations on (a dense embedding's columns
    # are correlated with the intercept and scaled unlike n-gram counts): columns centred at their trial-weighted
    # mean mu (x beta + b0 = (x - mu) beta + b0', b0' = b0 + mu . beta; the intercept is not penalised, so the
    # optimum is unchanged), and beta = d * gamma with d the inverse square root of the Hessian's diagonal at
    # p = 1/2 (Jacobi; the penalty stays ||beta||^2 / 2, so the optimum in beta is unchanged too).
    mu = np.concatenate([np.asarray(xat @ trials).ravel() / n_total for _, _, xat in blocks])
    sq = np.concatenate(
        [
            np.asarray((xat.multiply(xat) if sparse.issparse(xat) else xat * xat) @ trials).ravel()
            for _, _, xat in blocks
        ]
    )
    d = 1.0 / np.sqrt(0.25 * scale * np.maximum(sq - n_total * mu**2, 0.0) + ridge)
    if init is None:
        start = np.zeros(len(active) + 1)
    else:
        beta0 = init[0][active]
        start = np.r_[beta0 / d, init[1] + float(mu @ beta0)]

    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        beta, b0 = d * theta[:-1], theta[-1] - float(mu @ (d * theta[:-1]))
        z = np.full(len(trials), b0)
        for (_, xa, _), lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True):
            z += np.asarray(xa @ beta[lo:hi]).ravel()
        loss = float(np.sum(trials * np.logaddexp(0.0, z) - successes * z))
        resid = trials / (1.0 + np.exp(-z)) - successes  # d loss / d z
        total = float(resid.sum())
        grad = np.empty_like(theta)
        for (_, _, xat), lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True):
            grad[lo:hi] = np.asarray(xat @ resid).ravel()
        grad[:-1] = d * (scale * (grad[:-1] - mu * total) + ridge * beta)
        grad[-1] = scale * total
        return scale * loss + 0.5 * ridge * float(beta @ beta), grad

    result = minimize(
        objective, start, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": 1e-4}
    )
    theta = np.asarray(result.x, dtype=np.float64)
    beta = np.zeros(offset)
    beta[active] = d * theta[:-1]
    return beta, float(theta[-1] - beta[active] @ mu)


def linear_scores(x: Any, beta: FloatArray) -> FloatArray:
    """``x @ beta`` for features as :func:`fit_binomial_logistic` takes them (a matrix or a tuple of column
    blocks), float64 (N,).

    Raises:
        ValueError: the blocks' columns do not add up to ``len(beta)``.
    """
    blocks = x if isinstance(x, tuple) else (x,)
    width = sum(block.shape[1] for block in blocks)
    if not blocks or width != len(beta):
        raise ValueError(f"features have {width} columns, beta has {len(beta)}")
    out = np.zeros(blocks[0].shape[0])
    lo = 0
    for block in blocks:
        out += np.asarray(block @ beta[lo : lo + block.shape[1]], dtype=np.float64).ravel()
        lo += block.shape[1]
    return out


def _is_prefix(text: str) -> bool:
    return any(mark in text for mark in _TURN_MARKS)


def _prompt_block(text: str) -> str:
    """The text up to its first turn marker (the whole text for a prompt-level anchor)."""
    cut = min((i for i in (text.find(mark) for mark in _TURN_MARKS) if i >= 0), default=len(text))
    return text[:cut]


# the head: None (fitted on nothing: the prior), a float (every outcome it saw had one label), or (beta (F,), b0)
Head = None | float | tuple[FloatArray, float]


@dataclass
class _Batch:
    """The outcomes of one :meth:`ConvexSuccessPredictor.update` call (one policy version), one row per text.

    Attributes:
        version: the update's number (1 for the first).
        texts: distinct texts (N,). successes, trials: float64 (N,) weighted counts summed over the call.
        x: the (N, F) features as column blocks (see :meth:`ConvexSuccessPredictor._features`).
        states: the policy-state block of ``x`` (N, F_s) as computed at the update (None without one): kept in
            the state dict, since the policy that produced it is gone by the time a run resumes.
        groups: the sibling-consensus rows (N, 3) as registered at the update (None without one; ``x`` holds them,
            or their :func:`~trace_rl.predictor.consensus.prior_columns` for "group-prior"): kept in the state
            dict, since the trees they were read from are gone by the time a run resumes.
    """

    version: int
    texts: list[str]
    successes: FloatArray
    trials: FloatArray
    x: Any
    states: FloatArray | None = None
    groups: FloatArray | None = None


class ConvexSuccessPredictor:
    """Fixed features + binomial logistic head refit on a window of outcomes + per-text Beta posterior.

    Args:
        name: the name it was built under (kept in the state dict and checked on load).
        config: hyper-parameters.
        encoder: optional ``texts -> float32 (n, H)`` frozen embedding function, applied to each text's prompt
            block and cached per prompt.
        state: optional ``texts -> float64 (n, F_s)`` policy-state function (a
            :class:`~trace_rl.predictor.policy_state.PolicyStateEncoder`); the "state" feature sets need one
            before their first :meth:`update` or warm :meth:`predict` (see :meth:`attach_state`).
    """

    #: The online trainer calls ``update`` once per RL step with all of that step's nodes (each call refits on
    #: everything kept), and builds examples weighted by their number of leaves (= trials).
    refits_on_update = True
    example_weighting = "leaves"

    def __init__(self, name: str, config: ConvexConfig, encoder: Any = None, state: Any = None) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        if "minilm" in config.features and encoder is None:
            raise ValueError(f"features={config.features!r} needs an encoder")
        self.name = name
        self.config = config
        self.prior = float(config.prior)
        self.max_chars = int(config.max_chars)
        self._encoder = encoder
        self._state = state
        self._hasher = HashingVectorizer(
            analyzer="char",
            ngram_range=config.ngram_range,
            n_features=config.n_features,
            alternate_sign=False,
            norm=None,
            lowercase=False,
        )
        self._embed_cache: dict[str, np.ndarray] = {}
        self._group: OrderedDict[str, FloatArray] = OrderedDict()  # prefix text -> sibling-consensus row
        # the kept updates, oldest first; per stored text its [weighted successes, weighted trials] over them and
        # its held-out prior (the head's estimate just before the update that stored it)
        self._batches: deque[_Batch] = deque()
        self._store: dict[str, list[float]] = {}
        self._heldout: dict[str, float] = {}
        self._model: Head = None
        self._scale: float | None = None
        kappa = config.kappa_default if config.kappa is None else config.kappa
        self.kappa: dict[str, float] = {"prompt": kappa, "prefix": kappa}
        self.num_updates = 0
        self._timing = {"predict_calls": 0.0, "predict_texts": 0.0, "predict_seconds": 0.0}
        self._timing |= {"update_steps": 0.0, "update_texts": 0.0, "update_seconds": 0.0}

    # ------------------------------------------------------------------ state
    @property
    def is_warm(self) -> bool:
        """False until the first :meth:`update`; before it every estimate equals ``prior``."""
        return self.num_updates > 0

    @property
    def timing(self) -> dict[str, float]:
        """Cumulative wall-clock of scoring and updates: calls, texts, seconds."""
        return dict(self._timing)

    @property
    def num_texts(self) -> int:
        """Distinct texts with kept outcomes."""
        return len(self._store)

    @property
    def num_rows(self) -> int:
        """Rows the head is fitted on: one per (kept update, distinct text of that update)."""
        return sum(len(b.texts) for b in self._batches)

    def history(self, texts: Sequence[str]) -> tuple[FloatArray, FloatArray]:
        """(successes, trials) float64 (n,) kept for each text, decay-weighted (0, 0 for texts without any)."""
        rows = [self._store.get(t, (0.0, 0.0)) for t in validate_texts(texts)]
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 2)
        return arr[:, 0], arr[:, 1]

    def prior_strength(self, texts: Sequence[str]) -> FloatArray:
        """kappa per text (its level's fitted prior strength), float64 (n,)."""
        return np.asarray(
            [self.kappa["prefix" if _is_prefix(t) else "prompt"] for t in validate_texts(texts)],
            dtype=np.float64,
        )

    # ------------------------------------------------------------------ features
    @property
    def uses_state(self) -> bool:
        """Whether the features include the policy's hidden state (feature sets with "state")."""
        return "state" in self.config.features

    def attach_state(self, state: Any) -> None:
        """Give a "state" predictor its policy-state function ``texts -> float64 (n, F_s)`` (the trainer attaches
        a :class:`~trace_rl.predictor.policy_state.PolicyStateEncoder` over its live policy).

        Raises:
            ValueError: this predictor's features do not use a policy state (the setting could not take effect).
        """
        if not self.uses_state:
            raise ValueError(
                f"predictor {self.name!r} (features {self.config.features!r}) reads no policy state"
            )
        self._state = state

    def register_contexts(self, texts: Sequence[str], token_ids: Sequence[npt.ArrayLike]) -> None:
        """Tell the attached policy-state function which token context each text stands for (its ``register``;
        a no-op for predictors without a policy state, so a driver can always call it)."""
        if self.uses_state:
            register = getattr(self._state, "register", None)
            if register is None:
                raise ValueError(
                    f"predictor {self.name!r}: attach a PolicyStateEncoder before registering contexts"
                )
            register(list(texts), list(token_ids))

    @property
    def uses_group(self) -> bool:
        """Whether the features include the sibling consensus of the prefix's tree (feature sets with "group")."""
        return "group" in self.config.features

    @property
    def reads_state_outcomes(self) -> bool:
        """Whether the features hold the outcomes of the prefix's own environment state ("group"; "group-prior"
        leaves them out): such a predictor must not be given them again as evidence (``budget.state_evidence``)."""
        return reads_state_outcomes(self.config.features)

    def register_group(self, texts: Sequence[str], rows: npt.ArrayLike) -> None:
        """Remember the sibling-consensus row (float (n, 3), :data:`~trace_rl.predictor.consensus.GROUP_FEATURES`)
        of each prefix text, as :func:`~trace_rl.predictor.consensus.sibling_consensus` computed it from the text's
        tree; a no-op for predictors without the group block, so a driver can always call it. A text registered
        again takes its newest row; at most ``GROUP_CAPACITY`` rows are kept (least recently registered or used
        dropped first).

        Raises:
            ValueError: lengths differ, a row is not 3 finite numbers in [0, 1], or its same_state_success exceeds
                its same_state or others_success (no tree gives such a row).
        """
        if not self.uses_group:
            return
        items = validate_texts(texts)
        arr = np.asarray(rows, dtype=np.float64)
        if arr.shape != (len(items), len(GROUP_FEATURES)):
            raise ValueError(
                f"register_group: {len(items)} texts need rows of shape ({len(items)}, {len(GROUP_FEATURES)});"
                f" got {arr.shape}"
            )
        if not np.all(np.isfinite(arr)) or (arr < 0).any() or (arr > 1).any():
            raise ValueError("register_group: sibling-consensus rows must be finite shares in [0, 1]")
        if (arr[:, 1] > np.minimum(arr[:, 0], arr[:, 2]) + 1e-9).any():
            raise ValueError(
                "register_group: same_state_success must not exceed same_state or others_success (the state's "
                "successes are a part of both); rows come from sibling_consensus"
            )
        for text, row in zip(items, arr, strict=True):
            self._group[text] = row
            self._group.move_to_end(text)
        while len(self._group) > GROUP_CAPACITY:
            self._group.popitem(last=False)

    def _group_block(self, texts: list[str]) -> FloatArray:
        """The sibling-consensus rows of ``texts``, float64 (N, 3): zeros for a prompt-level text (depth 0 has
        no siblings by definition), the registered row for a prefix.

        Raises:
            ValueError: a prefix text without a registered row (the driver must :meth:`register_group` first).
        """
        out = np.zeros((len(texts), len(GROUP_FEATURES)), dtype=np.float64)
        for i, t in enumerate(texts):
            if not _is_prefix(t):
                continue
            row = self._group.get(t)
            if row is None:
                raise ValueError(
                    f"predictor {self.name!r}: no sibling-consensus row registered for prefix text "
                    f"{t[:60]!r}...: call register_group(texts, sibling_consensus(tree, nodes)) before it scores "
                    "or trains on a prefix"
                )
            self._group.move_to_end(t)
            out[i] = row
        return out

    def _state_block(self, texts: list[str]) -> FloatArray:
        """The policy-state rows of ``texts``, each divided by its L2 norm, float64 (N, F_s)."""
        if self._state is None:
            raise ValueError(
                f"predictor {self.name!r} needs the policy's state: call attach_state(PolicyStateEncoder(...)) "
                "before it scores or trains"
            )
        rows = np.asarray(self._state(texts), dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(texts) or not np.all(np.isfinite(rows)):
            raise ValueError(
                f"the policy-state function gave {rows.shape} (or non-finite) for {len(texts)} texts"
            )
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

    def _embeddings(self, texts: list[str]) -> FloatArray:
        """The frozen encoder's embedding of each text's prompt block, float64 (N, H), cached per prompt block: a
        prefix shares its prompt's embedding, and its turns reach the head through the n-gram counts."""
        keys = [_prompt_block(t) for t in texts]
        missing = [k for k in dict.fromkeys(keys) if k not in self._embed_cache]
        for lo in range(0, len(missing), self.config.embed_batch):
            chunk = missing[lo : lo + self.config.embed_batch]
            for k, e in zip(chunk, np.asarray(self._encoder(chunk), dtype=np.float64), strict=True):
                self._embed_cache[k] = e
        return np.stack([self._embed_cache[k] for k in keys])

    def _features(
        self, texts: list[str], states: FloatArray | None = None, groups: FloatArray | None = None
    ) -> tuple[Any, ...]:
        """The (N, F) features as column blocks: scaled n-gram counts (scipy CSR, N x n_features), the
        prompt block's frozen embedding (dense float64, N x H), the unit-norm policy state at the text's token
        context (dense float64, N x F_s; ``states`` when given, e.g. restored) and the sibling consensus (dense
        float64, N x 3, or its N x 2 :func:`~trace_rl.predictor.consensus.prior_columns` for "group-prior";
        ``groups``, the registered N x 3 rows, when given), in that order (:func:`fit_binomial_logistic`); each block only
        where ``features`` names it."""
        parts: list[Any] = []
        if "ngram" in self.config.features:
            parts.append(self._hasher.transform(texts) * (self._scale or 1.0))
        if "minilm" in self.config.features:
            parts.append(self._embeddings(texts))
        if self.uses_state:
            parts.append(self._state_block(texts) if states is None else states)
        if self.uses_group:
            block = self._group_block(texts) if groups is None else groups
            parts.append(prior_columns(block) if uses_group_prior(self.config.features) else block)
        return tuple(parts)

    def _set_scale(self, texts: list[str]) -> None:
        """Fix the n-gram scale once, at the first update: a median text of that batch gets unit feature norm
        (``c`` then means about the same for any task)."""
        if "ngram" in self.config.features and self._scale is None:
            raw = self._hasher.transform(texts)
            norms = np.sqrt(np.asarray(raw.multiply(raw).sum(axis=1)).ravel())
            self._scale = 1.0 / max(float(np.median(norms)), 1e-6)

    def prepare(self, texts: Sequence[str]) -> float:
        """Embed the prompt blocks of ``texts`` with the frozen encoder ahead of time (no-op without one).

        A frozen encoder's features of a known dataset (the training prompts) can be computed once at set-up
        instead of inside every training step. Returns the seconds it took.
        """
        start = time.perf_counter()
        if "minilm" in self.config.features:  # the embeddings only (a policy state is never cached: it moves)
            self._embeddings(validate_texts(texts))
        return time.perf_counter() - start

    def text_estimate(self, texts: Sequence[str], features: Any = None) -> FloatArray:
        """The current head's estimate from the text alone (no history), float64 (n,) in [eps, 1 - eps].

        The head is fitted on every kept outcome, a stored text's own included: it is the prior of texts without
        kept outcomes only (see :meth:`prior_estimate`). ``features``: the texts' feature rows when already
        computed (internal).
        """
        items = validate_texts(texts)
        if self._model is None or not items:
            return np.full(len(items), self.prior, dtype=np.float64)
        if isinstance(self._model, float):  # every kept outcome had the same label
            out = np.full(len(items), self._model, dtype=np.float64)
        else:
            x = self._features(items) if features is None else features
            beta, b0 = self._model
            out = 1.0 / (1.0 + np.exp(-(linear_scores(x, beta) + b0)))
        return np.clip(out, self.config.eps, 1.0 - self.config.eps)

    def prior_estimate(self, texts: Sequence[str]) -> FloatArray:
        """The prior of each text's history posterior, float64 (n,) in [eps, 1 - eps].

        For a text with kept outcomes: its held-out estimate, the head's estimate just before the update that
        stored it (``prior`` for texts stored by the first update: no head existed), i.e. a head fitted without
        any of the text's outcomes. For any other text: the current head's estimate (:meth:`text_estimate`), which
        is what its held-out estimate would be if it were stored next.
        """
        items = validate_texts(texts)
        out = self.text_estimate(items)
        for i, t in enumerate(items):
            if t in self._heldout:
                out[i] = self._heldout[t]
        return out

    # ------------------------------------------------------------------ API
    def predict(self, texts: Sequence[str]) -> FloatArray:
        """Success estimates: the prior, combined with the text's own kept history when it has one.

        ``(kappa p + s) / (kappa + n)`` with p = :meth:`prior_estimate`, (s, n) = :meth:`history` and kappa =
        :meth:`prior_strength` (the prior alone with ``kappa = 0``, history off).

        Args:
            texts: n strings (from :func:`serialize_anchor`).

        Returns:
            float64 (n,) in [eps, 1 - eps]; ``prior`` everywhere before the first update.

        Raises:
            ValueError: ``texts`` is a single string or holds a non-string.
        """
        items = validate_texts(texts)
        start = time.perf_counter()
        if self.uses_group and (
            self._model is None or isinstance(self._model, float)
        ):  # no head reads the rows yet (cold, or every kept outcome alike): still refuse unregistered ones
            self._group_block(items)
        out = self._posterior(items, np.zeros(len(items)), np.zeros(len(items)))
        self._timing["predict_calls"] += 1
        self._timing["predict_texts"] += len(items)
        self._timing["predict_seconds"] += time.perf_counter() - start
        return out

    def posterior(self, texts: Sequence[str], successes: npt.ArrayLike, trials: npt.ArrayLike) -> FloatArray:
        """Success estimates after outcomes not yet given to :meth:`update`: ONE Beta update of the prior.

        ``(kappa p + s_kept + s) / (kappa + n_kept + n)`` with p = :meth:`prior_estimate` and kappa =
        :meth:`prior_strength`: the outcomes a step has just observed (e.g. the rollouts below an anchor,
        `trace_rl.train.step.anchor_values`) join the kept ones in the same posterior, instead of a second Beta
        update whose prior would already contain the first. With ``kappa = 0`` (history off) only ``s / n``
        moves the prior. Before the first update the prior is ``prior`` and kappa ``kappa`` or ``kappa_default``.

        Args:
            texts: n strings. successes, trials: float (n,), 0 <= s <= n.

        Returns:
            float64 (n,) in [eps, 1 - eps].

        Raises:
            ValueError: bad texts, shapes other than (n,), counts not finite, negative or s > n.
        """
        items = validate_texts(texts)
        s = np.asarray(successes, dtype=np.float64)
        n = np.asarray(trials, dtype=np.float64)
        if s.shape != (len(items),) or n.shape != (len(items),):
            raise ValueError(
                f"successes and trials must have shape ({len(items)},); got {s.shape}, {n.shape}"
            )
        if not (np.all(np.isfinite(s)) and np.all(np.isfinite(n))) or (s < 0).any() or (s > n + 1e-9).any():
            raise ValueError("successes and trials must be finite with 0 <= successes <= trials")
        return self._posterior(items, s, n)

    def _posterior(self, items: list[str], s: FloatArray, n: FloatArray) -> FloatArray:
        p = self.prior_estimate(items)
        if self.config.kappa != 0:
            s_kept, n_kept = self.history(items)
            s, n = s + s_kept, n + n_kept
        return np.clip(
            posterior_mean(p, s, n, self.prior_strength(items)), self.config.eps, 1.0 - self.config.eps
        )

    def update(
        self, texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        """Add one policy version's examples, forget the versions that leave the window, refit the head.

        A target y with weight w adds w * y successes and w trials to its text (pass weights = number of
        rollouts behind each target to count evidence correctly; weight 1 treats every target as one trial). A
        text without kept outcomes first gets its held-out prior (the head's estimate before this refit). The
        head minimises ``c`` times the binomial negative log-likelihood plus ``||beta||^2 / 2`` over the kept rows
        (:func:`fit_binomial_logistic`, warm-started); a row of age a (versions) has weight ``history_decay ** a``.

        Returns:
            {"loss": weighted MSE of the head's estimate on this batch before the refit, "n": n, "texts": distinct
            texts kept, "rows": rows fitted, "kappa_prompt", "kappa_prefix", "seconds"}.

        Raises:
            ValueError: see :func:`trace_rl.predictor.base.validate_update`.
        """
        items, y, w = validate_update(texts, targets, weights)
        start = time.perf_counter()
        index: dict[str, int] = {}
        row = np.asarray([index.setdefault(t, len(index)) for t in items], dtype=np.int64)
        distinct = list(index)
        self._set_scale(distinct)
        groups = self._group_block(distinct) if self.uses_group else None  # raw rows, as registered
        x = self._features(distinct, groups=groups)
        before = self.text_estimate(distinct, x)
        loss = float(np.sum(w * (before[row] - y) ** 2) / np.sum(w))
        for t, b in zip(distinct, before, strict=True):
            if t not in self._store:
                self._heldout[t] = float(b)
        self.num_updates += 1
        self._batches.append(
            _Batch(
                version=self.num_updates,
                texts=distinct,
                successes=np.bincount(row, weights=w * y, minlength=len(distinct)).astype(np.float64),
                trials=np.bincount(row, weights=w, minlength=len(distinct)).astype(np.float64),
                x=x,
                states=x[-2 if self.uses_group else -1] if self.uses_state else None,
                groups=groups,
            )
        )
        self._forget()
        self._refit()
        seconds = time.perf_counter() - start
        self._timing["update_steps"] += 1
        self._timing["update_texts"] += len(items)
        self._timing["update_seconds"] += seconds
        return {
            "loss": loss,
            "n": float(len(items)),
            "texts": float(len(self._store)),
            "rows": float(self.num_rows),
            "kappa_prompt": self.kappa["prompt"],
            "kappa_prefix": self.kappa["prefix"],
            "seconds": seconds,
        }

    def _forget(self) -> None:
        """Drop the updates older than ``history_window`` versions (none with ``history_window = None``)."""
        window = self.config.history_window
        while window is not None and self._batches and self._batches[0].version <= self.num_updates - window:
            self._batches.popleft()

    def _refit(self, fit_head: bool = True) -> None:
        """Refit the head on the kept rows (unless ``fit_head`` is False: a restored one), aggregate the kept
        history per text (a text whose outcomes all left the window loses its held-out prior), fit kappa."""
        from scipy import sparse
        from threadpoolctl import threadpool_limits

        batches = list(self._batches)
        if not batches:
            self._store, self._heldout = {}, {}
            return
        weight = np.concatenate(
            [
                np.full(len(b.texts), self.config.history_decay ** (self.num_updates - b.version))
                for b in batches
            ]
        )
        succ = np.concatenate([b.successes for b in batches]) * weight
        trials = np.concatenate([b.trials for b in batches]) * weight
        texts = [t for b in batches for t in b.texts]
        self._store = {}
        for t, si, ni in zip(texts, succ, trials, strict=True):
            kept = self._store.setdefault(t, [0.0, 0.0])
            kept[0] += float(si)
            kept[1] += float(ni)
        self._heldout = {t: p for t, p in self._heldout.items() if t in self._store}
        if fit_head and (trials > 0).any():
            fail = trials - succ
            if succ.sum() <= 1e-9 or fail.sum() <= 1e-9:  # one class only: the (clipped) observed rate
                self._model = float(np.clip(succ.sum() / trials.sum(), self.config.eps, 1 - self.config.eps))
            else:
                init = self._model if isinstance(self._model, tuple) else None
                with threadpool_limits(
                    1
                ):  # a small problem: thread start-up costs more than it saves (10-25x)
                    self._model = fit_binomial_logistic(
                        tuple(
                            sparse.vstack(blocks, format="csr")
                            if sparse.issparse(blocks[0])
                            else np.concatenate(blocks)
                            for blocks in zip(*(b.x for b in batches), strict=True)
                        ),
                        succ,
                        trials,
                        self.config.c,
                        init=init,
                        max_iter=self.config.max_iter,
                    )
        if self.config.kappa is not None:
            self.kappa = {"prompt": self.config.kappa, "prefix": self.config.kappa}
            return
        # kappa against the same held-out priors the posterior uses: an in-sample estimate has partly memorised
        # each text's outcomes, which would understate their spread around it (and overstate kappa)
        stored = list(self._store)
        counts = np.asarray([self._store[t] for t in stored], dtype=np.float64).reshape(-1, 2)
        p = np.asarray([self._heldout[t] for t in stored], dtype=np.float64)
        levels = np.asarray([_is_prefix(t) for t in stored], dtype=bool)
        for level, mask in (("prompt", ~levels), ("prefix", levels)):
            s_l, n_l = counts[mask, 0], counts[mask, 1]
            if int((n_l >= 2).sum()) >= self.config.kappa_min_texts:
                self.kappa[level] = fit_prior_strength(p[mask], s_l, n_l)

    def state_dict(self) -> dict[str, Any]:
        """{"format", "name", "num_updates", "config", "batches", "heldout", "head", "kappa", "scale"}.

        "batches": the kept updates, each {"version", "texts", "successes", "trials"}; "heldout": the stored
        texts' held-out priors; "head": the fitted head (None, a float, or (beta float64 (F,), b0)), so that a
        resumed run continues from the same fit (each refit is warm-started from the previous one, so a refit from
        scratch would land on a slightly different one).
        """
        return {
            "format": STATE_FORMAT,
            "name": self.name,
            "num_updates": self.num_updates,
            "config": asdict(self.config),
            "batches": [
                {
                    "version": b.version,
                    "texts": list(b.texts),
                    "successes": b.successes.tolist(),
                    "trials": b.trials.tolist(),
                }
                | ({} if b.states is None else {"states": b.states.tolist()})
                | ({} if b.groups is None else {"groups": b.groups.tolist()})
                for b in self._batches
            ],
            "heldout": dict(self._heldout),
            "head": self._model
            if not isinstance(self._model, tuple)
            else (self._model[0].copy(), self._model[1]),
            "kappa": dict(self.kappa),
            "scale": self._scale,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        A format-1 state (one aggregated store, no versions, no head) loads as one update at its last version, its
        head refit on it; its stored texts without a held-out prior get ``prior``.

        Raises:
            ValueError: missing keys, an unknown format version, or a state of another predictor.
        """
        fmt = state.get("format")
        needed = {"format", "name", "num_updates", "batches" if fmt == STATE_FORMAT else "store"}
        missing = needed - set(state)
        if missing:
            raise ValueError(f"predictor state lacks {sorted(missing)}")
        if fmt not in (1, STATE_FORMAT) or state["name"] != self.name:
            raise ValueError(f"predictor state is for {state['name']!r} (format {fmt!r}), not {self.name!r}")
        num_updates = int(state["num_updates"])
        raw: list[Mapping[str, Any]]
        if fmt == 1:
            store = state["store"]
            raw = [
                {
                    "version": num_updates,
                    "texts": list(store),
                    "successes": [v[0] for v in store.values()],
                    "trials": [v[1] for v in store.values()],
                }
            ]
        else:
            raw = list(state["batches"])
        self._scale = None if state.get("scale") is None else float(state["scale"])
        self._batches = deque()
        for b in raw:
            texts = [str(t) for t in b["texts"]]
            if not texts:
                continue
            self._set_scale(texts)
            successes = np.asarray(b["successes"], dtype=np.float64)
            trials = np.asarray(b["trials"], dtype=np.float64)
            states = None
            if self.uses_state:
                if "states" not in b:
                    raise ValueError(
                        "predictor state lacks the policy-state rows of a kept update ('states')"
                    )
                states = np.asarray(b["states"], dtype=np.float64).reshape(len(texts), -1)
            groups = None
            if self.uses_group:
                if "groups" not in b:
                    raise ValueError(
                        "predictor state lacks the sibling-consensus rows of a kept update ('groups')"
                    )
                groups = np.asarray(b["groups"], dtype=np.float64).reshape(len(texts), len(GROUP_FEATURES))
            x = self._features(texts, states, groups)
            self._batches.append(_Batch(int(b["version"]), texts, successes, trials, x, states, groups))
        self.num_updates = num_updates
        heldout = {str(t): float(v) for t, v in state.get("heldout", {}).items()}
        self._heldout = {t: heldout.get(t, self.prior) for b in self._batches for t in b.texts}
        self._forget()
        head = state.get("head") if fmt == STATE_FORMAT else None
        self._model = (
            head
            if head is None or isinstance(head, float)
            else (np.asarray(head[0], dtype=np.float64), float(head[1]))
        )
        self._refit(fit_head=self._model is None)


#: Inverse L2 strength per predictor, chosen by 5-fold CV on demo-task outcomes (docs/predictor.md); the state
#: predictors take ngram+minilm's (not tuned on the anchors they are measured on: docs/predictor.md).
DEFAULT_C = {
    "ngram": 30.0,
    "minilm-head": 10.0,
    "ngram+minilm": 30.0,
    "state-head": 30.0,
    "ngram+minilm+state": 30.0,
    "ngram+minilm+group": 30.0,
    "ngram+minilm+group-prior": 30.0,
}


def build_convex_predictor(name: str, **overrides: Any) -> ConvexSuccessPredictor:
    """Build "ngram", "minilm-head" (frozen MiniLM embeddings), "ngram+minilm", the policy-state predictors
    "state-head" and "ngram+minilm+state" (see ``build_predictor``; these need
    :meth:`ConvexSuccessPredictor.attach_state` before they score or train), or the group-aware
    "ngram+minilm+group" and "ngram+minilm+group-prior" (need :meth:`ConvexSuccessPredictor.register_group` rows
    for the prefixes they score).

    Raises:
        ValueError: unknown name or option.
    """
    features = CONVEX_FEATURES.get(name)
    if features is None:
        raise ValueError(f"unknown convex predictor {name!r}; choose one of {', '.join(CONVEX_NAMES)}")
    if "features" in overrides:
        raise ValueError(
            f"the name sets the features ({name!r}: {features!r}); pick the name, not a features option"
        )
    overrides.setdefault("c", DEFAULT_C[name])
    overrides.pop("seed", None)  # the fit is deterministic
    overrides.pop("lr", None)  # no learning rate: a convex refit
    if "ngram_range" in overrides:
        overrides["ngram_range"] = tuple(overrides["ngram_range"])
    try:
        config = replace(ConvexConfig(features=features), **overrides)
    except TypeError as exc:
        raise ValueError(f"unknown predictor option: {exc}") from None
    encoder = _minilm_encoder(config.device, config.embed_batch) if "minilm" in features else None
    return ConvexSuccessPredictor(name, config, encoder)


def _minilm_encoder(device: str | None, batch: int) -> Any:
    """A frozen all-MiniLM-L6-v2 mean-pooled embedding function ``texts -> float32 (n, 384)``."""
    import torch

    from trace_rl.predictor import backbones

    backbone, tok = backbones.load_hf(backbones.minilm_path(), pooling="mean")
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backbone = backbone.to(dev).eval()
    backbone.requires_grad_(False)

    def encode(texts: Sequence[str]) -> np.ndarray:
        ids = tok.encode(list(texts))
        length = max(1, min(256, max(len(x) for x in ids)))
        input_ids = torch.full((len(ids), length), tok.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), length), dtype=torch.bool)
        for i, row in enumerate(ids):
            row = row[:length]
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = True
        with torch.inference_mode():
            out = backbone(input_ids.to(dev), mask.to(dev)).float().cpu().numpy()
        return out

    return encode
