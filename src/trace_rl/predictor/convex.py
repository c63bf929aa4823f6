"""A success predictor that learns from a few hundred examples: fixed text features and a convex head.

Why (docs/predictor.md#the-convex-predictor): a neural predictor trained online with a handful of AdamW steps per
RL step barely learns in a 30-step run (DEMO_HEADROOM.md: prompt-level Spearman about 0.3 online, 0.65-0.77 even
offline to convergence), while the difficulty of a prompt is often readable from surface features of its text.
This predictor therefore

1. maps each text to fixed features: character n-gram counts (``HashingVectorizer``; nothing to train, nothing to
   go stale) and, optionally, the mean-pooled embedding of a frozen pretrained encoder (all-MiniLM-L6-v2) of
   the text's prompt block, cached per prompt (a prefix shares its prompt's embedding; its turns reach the head
   through the n-grams);
2. keeps every (text, successes, trials) it was ever given, aggregated per text (a buffer of all past examples);
3. refits a binomial logistic regression (L2-regularised, convex: one global optimum, no schedule to tune;
   :func:`fit_binomial_logistic`, scipy L-BFGS-B warm-started from the previous fit) on the whole store at
   every :meth:`update`; a target y with weight w counts as w * y successes out of w trials,
   so the fit is the maximum-likelihood (calibrated) estimate of P(success | features);
4. for texts seen before, combines the text estimate with the text's own outcome history through a Beta
   posterior whose prior is the text estimate: ``v = (kappa * p + s) / (kappa + n)`` (Bayes with a
   Beta(kappa p, kappa (1 - p)) prior), with the prior strength ``kappa`` fitted per level (prompt / prefix) by
   maximum beta-binomial likelihood on the texts with at least two trials.

It implements the :class:`~trace_rl.predictor.base.SuccessPredictor` protocol; ``update`` is "add these
examples and refit" rather than one gradient step (the online trainer calls it once per RL step with that step's
new nodes, see :class:`~trace_rl.predictor.online.OnlineTrainer`).
"""

from __future__ import annotations

import time
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

FloatArray = npt.NDArray[np.float64]
STATE_FORMAT = 1
#: Grid of Beta prior strengths searched when fitting kappa (log-spaced, 0.1 .. 1000).
KAPPA_GRID = np.logspace(-1, 3, 41)
#: serialize_anchor marks every turn of a prefix with "[TURN t]" (or says how many it omitted).
_TURN_MARKS = ("\n[TURN ", " EARLIER TURNS OMITTED]\n")


@dataclass(frozen=True)
class ConvexConfig:
    """Hyper-parameters of :class:`ConvexSuccessPredictor`.

    Attributes:
        features: "ngram", "minilm" or "ngram+minilm" (concatenated).
        ngram_range: character n-gram lengths (inclusive).
        n_features: hashing dimension of the n-gram counts.
        c: inverse L2 strength of the logistic head (sklearn's ``C``); larger = weaker regularisation.
        max_iter: lbfgs iterations per refit (warm-started from the previous fit).
        kappa: prior strength of the history posterior; None = fitted per level, 0 = history off.
        kappa_default: prior strength used while a level has too few multi-trial texts to fit it.
        kappa_min_texts: multi-trial texts a level needs before its kappa is fitted.
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
    max_iter: int = 200
    kappa: float | None = None
    kappa_default: float = 4.0
    kappa_min_texts: int = 20
    max_chars: int = 1024
    prior: float = DEFAULT_PRIOR
    eps: float = DEFAULT_EPS
    device: str | None = None
    embed_batch: int = 64

    def __post_init__(self) -> None:
        lo, hi = self.ngram_range
        checks = [
            (
                self.features in ("ngram", "minilm", "ngram+minilm"),
                "features must be ngram, minilm or ngram+minilm",
            ),
            (1 <= lo <= hi <= 8, "ngram_range must satisfy 1 <= low <= high <= 8"),
            (self.n_features >= 16, "n_features must be >= 16"),
            (self.c > 0, "c must be > 0"),
            (self.max_iter >= 1, "max_iter must be >= 1"),
            (self.kappa is None or self.kappa >= 0, "kappa must be >= 0 (or None to fit it)"),
            (self.kappa_default > 0, "kappa_default must be > 0"),
            (self.kappa_min_texts >= 2, "kappa_min_texts must be >= 2"),
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

    Args:
        x: (N, F) features (scipy sparse or dense). successes, trials: (N,) weighted counts, 0 <= s <= n.
        c: inverse regularisation strength (> 0). init: (beta, b0) to start from (warm start).

    Returns:
        (beta float64 (F,), b0).
    """
    from scipy.optimize import minimize

    n_features = x.shape[1]
    start = np.zeros(n_features + 1) if init is None else np.r_[init[0], init[1]]

    # the same objective divided by c * sum(n) (same optimum, gradients of order 1: the scaling scikit-learn uses)
    scale = 1.0 / max(float(np.sum(trials)), 1e-12)
    ridge = scale / c

    def objective(theta: FloatArray) -> tuple[float, FloatArray]:
        beta, b0 = theta[:-1], theta[-1]
        z = np.asarray(x @ beta).ravel() + b0
        loss = float(np.sum(trials * np.logaddexp(0.0, z) - successes * z))
        resid = trials / (1.0 + np.exp(-z)) - successes  # d loss / d z
        grad = np.empty_like(theta)
        grad[:-1] = scale * np.asarray(x.T @ resid).ravel() + ridge * beta
        grad[-1] = scale * float(resid.sum())
        return scale * loss + 0.5 * ridge * float(beta @ beta), grad

    result = minimize(
        objective, start, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": 1e-4}
    )
    theta = np.asarray(result.x, dtype=np.float64)
    return theta[:-1], float(theta[-1])


def _is_prefix(text: str) -> bool:
    return any(mark in text for mark in _TURN_MARKS)


def _prompt_block(text: str) -> str:
    """The text up to its first turn marker (the whole text for a prompt-level anchor)."""
    cut = min((i for i in (text.find(mark) for mark in _TURN_MARKS) if i >= 0), default=len(text))
    return text[:cut]


class ConvexSuccessPredictor:
    """Fixed features + binomial logistic head refit on every example seen + per-text Beta posterior.

    Args:
        name: the name it was built under (kept in the state dict and checked on load).
        config: hyper-parameters.
        encoder: optional ``texts -> float32 (n, H)`` frozen embedding function, applied to each text's prompt
            block and cached per prompt.
    """

    #: The online trainer calls ``update`` once per RL step with all of that step's nodes (each call refits on
    #: everything seen), and builds examples weighted by their number of leaves (= trials).
    refits_on_update = True
    example_weighting = "leaves"

    def __init__(self, name: str, config: ConvexConfig, encoder: Any = None) -> None:
        from sklearn.feature_extraction.text import HashingVectorizer

        if "minilm" in config.features and encoder is None:
            raise ValueError(f"features={config.features!r} needs an encoder")
        self.name = name
        self.config = config
        self.prior = float(config.prior)
        self.max_chars = int(config.max_chars)
        self._encoder = encoder
        self._hasher = HashingVectorizer(
            analyzer="char",
            ngram_range=config.ngram_range,
            n_features=config.n_features,
            alternate_sign=False,
            norm=None,
            lowercase=False,
        )
        self._embed_cache: dict[str, np.ndarray] = {}
        # per text: [weighted successes, weighted trials]; _rows holds the texts' features in store order
        self._store: dict[str, list[float]] = {}
        self._rows: Any = None
        # per text: the head's estimate when the text first arrived (out-of-sample), for fitting kappa
        self._heldout: dict[str, float] = {}
        self._model: Any = None  # None (never fit), a float (one class seen), or (beta (F,), b0)
        self._scale: float | None = None
        self.kappa: dict[str, float] = {"prompt": config.kappa_default, "prefix": config.kappa_default}
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
        """Distinct texts in the store."""
        return len(self._store)

    def history(self, texts: Sequence[str]) -> tuple[FloatArray, FloatArray]:
        """(successes, trials) float64 (n,) recorded for each text (0, 0 for unseen texts)."""
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
    def _features(self, texts: list[str]) -> Any:
        from scipy import sparse

        parts = []
        if "ngram" in self.config.features:
            parts.append(self._hasher.transform(texts) * (self._scale or 1.0))
        if "minilm" in self.config.features:
            # the encoder embeds the prompt block only (cached per prompt): a prefix shares its prompt's
            # embedding, and its turns reach the head through the n-gram counts
            keys = [_prompt_block(t) for t in texts]
            missing = [k for k in dict.fromkeys(keys) if k not in self._embed_cache]
            for lo in range(0, len(missing), self.config.embed_batch):
                chunk = missing[lo : lo + self.config.embed_batch]
                for k, e in zip(chunk, np.asarray(self._encoder(chunk), dtype=np.float64), strict=True):
                    self._embed_cache[k] = e
            parts.append(sparse.csr_matrix(np.stack([self._embed_cache[k] for k in keys])))
        return parts[0] if len(parts) == 1 else sparse.hstack(parts, format="csr")

    def _stored_features(self, known: Mapping[str, int] | None = None, rows: Any = None) -> Any:
        """Features of every stored text in store order (computed once per text, appended as texts arrive).

        ``known`` maps texts to their row in ``rows`` (features already computed by the caller).
        """
        from scipy import sparse

        done = 0 if self._rows is None else self._rows.shape[0]
        new = list(self._store)[done:]
        if new:
            if known is not None and rows is not None and all(t in known for t in new):
                block = rows[[known[t] for t in new]]
            else:
                block = self._features(new)
            self._rows = block if self._rows is None else sparse.vstack([self._rows, block], format="csr")
        return self._rows

    def prepare(self, texts: Sequence[str]) -> float:
        """Embed the prompt blocks of ``texts`` with the frozen encoder ahead of time (no-op without one).

        A frozen encoder's features of a known dataset (the training prompts) can be computed once at set-up
        instead of inside every training step. Returns the seconds it took.
        """
        start = time.perf_counter()
        if "minilm" in self.config.features:
            self._features(validate_texts(texts))
        return time.perf_counter() - start

    def text_estimate(self, texts: Sequence[str], features: Any = None) -> FloatArray:
        """The head's estimate from the text alone (no history), float64 (n,) in [eps, 1 - eps].

        ``features``: the texts' feature rows when already computed (internal).
        """
        items = validate_texts(texts)
        if self._model is None or not items:
            return np.full(len(items), self.prior, dtype=np.float64)
        if isinstance(self._model, float):  # every stored outcome had the same label
            out = np.full(len(items), self._model, dtype=np.float64)
        else:
            x = self._features(items) if features is None else features
            beta, b0 = self._model
            out = 1.0 / (1.0 + np.exp(-(np.asarray(x @ beta).ravel() + b0)))
        return np.clip(out, self.config.eps, 1.0 - self.config.eps)

    # ------------------------------------------------------------------ API
    def predict(self, texts: Sequence[str]) -> FloatArray:
        """Success estimates: the text estimate, combined with the text's own history when it has one.

        Args:
            texts: n strings (from :func:`serialize_anchor`).

        Returns:
            float64 (n,) in [eps, 1 - eps]; ``prior`` everywhere before the first update.

        Raises:
            ValueError: ``texts`` is a single string or holds a non-string.
        """
        items = validate_texts(texts)
        start = time.perf_counter()
        p = self.text_estimate(items)
        if self.is_warm and self.config.kappa != 0:
            s, n = self.history(items)
            p = posterior_mean(p, s, n, self.prior_strength(items))
        out = np.clip(p, self.config.eps, 1.0 - self.config.eps)
        self._timing["predict_calls"] += 1
        self._timing["predict_texts"] += len(items)
        self._timing["predict_seconds"] += time.perf_counter() - start
        return out

    def update(
        self, texts: Sequence[str], targets: npt.ArrayLike, weights: npt.ArrayLike | None = None
    ) -> dict[str, float]:
        """Add examples to the store and refit the head on everything stored.

        A target y with weight w adds w * y successes and w trials to its text (pass weights = number of
        rollouts behind each target to count evidence correctly; weight 1 treats every target as one trial).
        The head minimises ``c`` times the binomial negative log-likelihood plus ``||beta||^2 / 2`` over all
        stored texts (:func:`fit_binomial_logistic`, warm-started).

        Returns:
            {"loss": weighted MSE of the text estimate on this batch before the refit, "n": n, "texts": distinct
            texts stored, "kappa_prompt", "kappa_prefix", "seconds"}.

        Raises:
            ValueError: see :func:`trace_rl.predictor.base.validate_update`.
        """
        items, y, w = validate_update(texts, targets, weights)
        start = time.perf_counter()
        x_items = self._features(items) if self._scale is not None else None
        before = self.text_estimate(items, x_items)
        loss = float(np.sum(w * (before - y) ** 2) / np.sum(w))
        for t, yi, wi, b in zip(items, y, w, before, strict=True):
            if t not in self._store and self._model is not None:
                self._heldout[t] = float(b)  # the estimate before the text was ever trained on
            row = self._store.setdefault(t, [0.0, 0.0])
            row[0] += float(wi * yi)
            row[1] += float(wi)
        if x_items is not None:
            self._stored_features({t: i for i, t in reversed(list(enumerate(items)))}, x_items)
        self._refit()
        self.num_updates += 1
        seconds = time.perf_counter() - start
        self._timing["update_steps"] += 1
        self._timing["update_texts"] += len(items)
        self._timing["update_seconds"] += seconds
        return {
            "loss": loss,
            "n": float(len(items)),
            "texts": float(len(self._store)),
            "kappa_prompt": self.kappa["prompt"],
            "kappa_prefix": self.kappa["prefix"],
            "seconds": seconds,
        }

    def _refit(self) -> None:
        texts = list(self._store)
        counts = np.asarray([self._store[t] for t in texts], dtype=np.float64).reshape(-1, 2)
        succ, trials = counts[:, 0], counts[:, 1]
        if not texts or not (trials > 0).any():
            return
        if "ngram" in self.config.features and self._scale is None:
            # one global scale, set at the first fit, so that a median text has unit feature norm (c then means
            # about the same for any task)
            raw = self._hasher.transform(texts)
            norms = np.sqrt(np.asarray(raw.multiply(raw).sum(axis=1)).ravel())
            self._scale = 1.0 / max(float(np.median(norms)), 1e-6)
        fail = trials - succ
        if succ.sum() <= 1e-9 or fail.sum() <= 1e-9:  # one class only: the (clipped) observed rate
            self._model = float(np.clip(succ.sum() / trials.sum(), self.config.eps, 1 - self.config.eps))
        else:
            from threadpoolctl import threadpool_limits

            init = self._model if isinstance(self._model, tuple) else None
            with threadpool_limits(1):  # a small problem: thread start-up costs more than it saves (10-25x)
                self._model = fit_binomial_logistic(
                    self._stored_features(),
                    succ,
                    trials,
                    self.config.c,
                    init=init,
                    max_iter=self.config.max_iter,
                )
        if self.config.kappa is not None:
            self.kappa = {"prompt": self.config.kappa, "prefix": self.config.kappa}
            return
        # kappa from out-of-sample estimates only: an in-sample fit has partly memorised each text's outcomes,
        # which would understate their spread around the estimate (and so overstate kappa)
        seen = np.asarray([t in self._heldout for t in texts])
        p = np.asarray([self._heldout.get(t, self.prior) for t in texts], dtype=np.float64)
        levels = np.asarray([_is_prefix(t) for t in texts])
        for level, mask in (("prompt", ~levels & seen), ("prefix", levels & seen)):
            if int((trials[mask] >= 2).sum()) >= self.config.kappa_min_texts:
                self.kappa[level] = fit_prior_strength(p[mask], succ[mask], trials[mask])

    def state_dict(self) -> dict[str, Any]:
        """{"format", "name", "num_updates", "config", "store", "kappa"}: the head is refit on load."""
        return {
            "format": STATE_FORMAT,
            "name": self.name,
            "num_updates": self.num_updates,
            "config": asdict(self.config),
            "store": {t: list(v) for t, v in self._store.items()},
            "heldout": dict(self._heldout),
            "kappa": dict(self.kappa),
            "scale": self._scale,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the head is refit on the restored store: the fit is deterministic).

        Raises:
            ValueError: missing keys, another format version, or a state of another predictor.
        """
        missing = {"format", "name", "num_updates", "store"} - set(state)
        if missing:
            raise ValueError(f"predictor state lacks {sorted(missing)}")
        if state["format"] != STATE_FORMAT or state["name"] != self.name:
            raise ValueError(
                f"predictor state is for {state['name']!r} (format {state['format']!r}), not {self.name!r}"
            )
        self._store = {str(t): [float(v[0]), float(v[1])] for t, v in state["store"].items()}
        self._heldout = {str(t): float(v) for t, v in state.get("heldout", {}).items()}
        self._scale = None if state.get("scale") is None else float(state["scale"])
        self._model = None
        self._rows = None
        if self._store:
            self._refit()
        self.num_updates = int(state["num_updates"])


CONVEX_NAMES = ("ngram", "minilm-head", "ngram+minilm")
#: Inverse L2 strength per predictor, chosen by 5-fold CV on demo-task outcomes (docs/predictor.md).
DEFAULT_C = {"ngram": 30.0, "minilm-head": 10.0, "ngram+minilm": 30.0}


def build_convex_predictor(name: str, **overrides: Any) -> ConvexSuccessPredictor:
    """Build "ngram", "minilm-head" (frozen MiniLM embeddings) or "ngram+minilm" (see ``build_predictor``).

    Raises:
        ValueError: unknown name or option.
    """
    features = {"ngram": "ngram", "minilm-head": "minilm", "ngram+minilm": "ngram+minilm"}.get(name)
    if features is None:
        raise ValueError(f"unknown convex predictor {name!r}; choose one of {', '.join(CONVEX_NAMES)}")
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
