"""A success predictor that learns from a few hundred examples: fixed text features and a convex head.

Why (docs/predictor.md#the-convex-predictor): a neural predictor trained online with a handful of AdamW steps per
RL step barely learns in a 30-step run (DEMO_HEADROOM.md: prompt-level Spearman about 0.3 online, 0.65-0.77 even
offline to convergence), while the difficulty of a prompt is often readable from surface features of its text.
This predictor therefore

1. maps each text to fixed features, one column block per feature block of its feature set (character n-gram
   counts, a frozen encoder's embedding of the prompt block, the policy's hidden state, the sibling consensus:
   :mod:`trace_rl.predictor.blocks`, one module per family behind one protocol);
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
new nodes, see :class:`~trace_rl.predictor.online.OnlineTrainer`). This module is the head: the window, refit,
posterior and state dict; the fits are in :mod:`~trace_rl.predictor.convex_head`, the hyper-parameters in
:mod:`~trace_rl.predictor.convex_config`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.predictor.base import posterior_mean, validate_texts, validate_update
from trace_rl.predictor.blocks.base import FeatureBlock, is_prefix
from trace_rl.predictor.blocks.group import GROUP_CAPACITY  # noqa: F401 (re-exported)
from trace_rl.predictor.blocks.minilm import minilm_encoder
from trace_rl.predictor.blocks.registry import BLOCKS, block_names
from trace_rl.predictor.capabilities import Capability
from trace_rl.predictor.convex_config import DEFAULT_C, FEATURE_SETS, ConvexConfig  # noqa: F401 (re-exported)
from trace_rl.predictor.convex_head import (  # noqa: F401 (re-exported)
    KAPPA_GRID,
    FloatArray,
    fit_binomial_logistic,
    fit_prior_strength,
    linear_scores,
)
from trace_rl.predictor.names import (  # noqa: F401 (re-exported)
    CONVEX_FEATURES,
    CONVEX_NAMES,
    GROUP_NAMES,
    STATE_NAMES,
    reads_state_outcomes,
    uses_group_prior,
)

STATE_FORMAT = 2
# the head: None (fitted on nothing: the prior), a float (every outcome it saw had one label), or (beta (F,), b0)
Head = None | float | tuple[FloatArray, float]


@dataclass
class _Batch:
    """The outcomes of one :meth:`ConvexSuccessPredictor.update` call (one policy version), one row per text.

    Attributes:
        version: the update's number (1 for the first).
        texts: distinct texts (N,). successes, trials: float64 (N,) weighted counts summed over the call.
        x: the (N, F) features as column blocks (see :meth:`ConvexSuccessPredictor._features`).
        kept: per feature block with a ``key`` (:class:`~trace_rl.predictor.blocks.base.FeatureBlock`), the rows
            its columns were computed from at the update, float64 (N, d): "states", the policy-state block of
            ``x``; "groups", the sibling-consensus rows as registered (``x`` holds them, or their
            :func:`~trace_rl.predictor.consensus.prior_columns` for "group-prior"). Kept in the state dict, since
            the policy and the trees they came from are gone by the time a run resumes.
    """

    version: int
    texts: list[str]
    successes: FloatArray
    trials: FloatArray
    x: Any
    kept: dict[str, FloatArray] = field(default_factory=dict)


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

    def __init__(self, name: str, config: ConvexConfig, encoder: Any = None, state: Any = None) -> None:
        self.name = name
        self.config = config
        #: its capabilities (`trace_rl.predictor.capabilities`): every convex predictor keeps a history posterior,
        #: caches frozen embeddings (``prepare``) and refits on its kept window at each update (``refit``: the
        #: online trainer calls ``update`` once per RL step with that step's nodes, weighted by their leaves); the
        #: "state" and "group" feature sets add ``state`` and ``group``.
        self.capabilities = frozenset(
            {Capability.POSTERIOR, Capability.PREPARE, Capability.REFIT}
            | ({Capability.STATE} if "state" in config.features else set())
            | ({Capability.GROUP} if "group" in config.features else set())
        )
        self.prior = float(config.prior)
        self.max_chars = int(config.max_chars)
        #: the feature blocks of ``config.features``, by name, in column order (trace_rl.predictor.blocks)
        self.blocks: dict[str, FeatureBlock] = {
            b: BLOCKS[b](name, config, encoder=encoder, state=state) for b in block_names(config.features)
        }
        # the kept updates, oldest first; per stored text its [weighted successes, weighted trials] over them and
        # its held-out prior (the head's estimate just before the update that stored it)
        self._batches: deque[_Batch] = deque()
        self._store: dict[str, list[float]] = {}
        self._heldout: dict[str, float] = {}
        self._model: Head = None
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
            [self.kappa["prefix" if is_prefix(t) else "prompt"] for t in validate_texts(texts)],
            dtype=np.float64,
        )

    # ------------------------------------------------------------------ features
    @property
    def uses_state(self) -> bool:
        """Whether the features include the policy's hidden state (feature sets with "state"; it declares the
        ``state`` capability)."""
        return Capability.STATE in self.capabilities

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
        self.blocks["state"].encoder = state  # type: ignore[attr-defined]

    def register_contexts(self, texts: Sequence[str], token_ids: Sequence[npt.ArrayLike]) -> None:
        """Tell the attached policy-state function which token context each text stands for (its ``register``;
        a no-op for predictors without a policy state, so a driver can always call it)."""
        self._register("contexts", texts, token_ids)

    @property
    def uses_group(self) -> bool:
        """Whether the features include the sibling consensus of the prefix's tree (feature sets with "group"; it
        declares the ``group`` capability)."""
        return Capability.GROUP in self.capabilities

    @property
    def reads_state_outcomes(self) -> bool:
        """Whether the features hold the outcomes of the prefix's own environment state ("group"; "group-prior"
        leaves them out): such a predictor must not be given them again as evidence (``budget.state_evidence``)."""
        return reads_state_outcomes(self.config.features)

    def register_group(self, texts: Sequence[str], rows: npt.ArrayLike) -> None:
        """Remember the sibling-consensus row (float (n, 3), as
        :func:`~trace_rl.predictor.consensus.sibling_consensus` computed it from the text's tree) of each prefix
        text (:meth:`~trace_rl.predictor.blocks.group.GroupBlock.register`, which raises ValueError for bad rows); a
        no-op for predictors without the group block, so a driver can always call it."""
        self._register("group", texts, rows)

    def _register(self, what: str, texts: Sequence[str], data: Any) -> None:
        """Hand ``data`` to every block that registers ``what`` (none: a no-op)."""
        for block in self.blocks.values():
            if block.registers == what:
                block.register(texts, data)

    def _features(
        self,
        texts: list[str],
        kept: Mapping[str, FloatArray] | None = None,
        fresh: dict[str, FloatArray] | None = None,
    ) -> tuple[Any, ...]:
        """The (N, F) features as column blocks, one per feature block in ``config.features`` order
        (:func:`fit_binomial_logistic`): scaled n-gram counts (scipy CSR, N x n_features), the prompt block's
        frozen embedding (dense float64, N x H), the unit-norm policy state at the text's token context (dense
        float64, N x F_s) and the sibling consensus (dense float64, N x 3, or its N x 2
        :func:`~trace_rl.predictor.consensus.prior_columns` for "group-prior").

        A block with a ``key`` computes its columns from ``kept[key]`` when ``kept`` is given (restored rows), else
        from rows it computes now, which go into ``fresh[key]`` when ``fresh`` is given (kept with an update)."""
        parts: list[Any] = []
        for block in self.blocks.values():
            rows = None
            if block.key is not None:
                rows = block.rows(texts) if kept is None else kept[block.key]
                if fresh is not None:
                    fresh[block.key] = rows
            parts.append(block.columns(texts, rows))
        return tuple(parts)

    def prepare(self, texts: Sequence[str]) -> float:
        """Embed the prompt blocks of ``texts`` with the frozen encoder ahead of time (no-op without one).

        A frozen encoder's features of a known dataset (the training prompts) can be computed once at set-up
        instead of inside every training step. Returns the seconds it took.
        """
        start = time.perf_counter()
        for block in self.blocks.values():  # the embeddings only (a policy state is never cached: it moves)
            block.prepare(texts)
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
        if not isinstance(self._model, tuple):  # no head reads the columns yet (cold, or every kept outcome
            for block in self.blocks.values():  # alike): still refuse texts a block could not score
                block.check(items)
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
        for block in self.blocks.values():
            block.fit(distinct)
        for block in self.blocks.values():  # refuse before computing anything (group: unregistered prefixes)
            block.check(distinct)
        kept: dict[str, FloatArray] = {}
        x = self._features(distinct, fresh=kept)
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
                kept=kept,
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
        levels = np.asarray([is_prefix(t) for t in stored], dtype=bool)
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
                | {key: rows.tolist() for key, rows in b.kept.items()}
                for b in self._batches
            ],
            "heldout": dict(self._heldout),
            "head": self._model
            if not isinstance(self._model, tuple)
            else (self._model[0].copy(), self._model[1]),
            "kappa": dict(self.kappa),
            "scale": None,  # the n-gram block's (format 2 always holds the key)
        } | {key: value for block in self.blocks.values() for key, value in block.state_dict().items()}

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
        for block in self.blocks.values():
            block.load_state_dict(state)
        self._batches = deque()
        for b in raw:
            texts = [str(t) for t in b["texts"]]
            if not texts:
                continue
            for block in self.blocks.values():
                block.fit(texts)
            successes = np.asarray(b["successes"], dtype=np.float64)
            trials = np.asarray(b["trials"], dtype=np.float64)
            kept = {k.key: k.restore(b, len(texts)) for k in self.blocks.values() if k.key is not None}
            x = self._features(texts, kept)
            self._batches.append(_Batch(int(b["version"]), texts, successes, trials, x, kept))
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
    encoder = minilm_encoder(config.device, config.embed_batch) if "minilm" in features else None
    return ConvexSuccessPredictor(name, config, encoder)
