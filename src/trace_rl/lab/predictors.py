"""Success predictors for the lab: the oracle, calibrated noisy oracles, and the plug-in point for learned ones.

A predictor answers `Query` records: a prompt (a `Task`) and, for a turn prefix, the turns so far. It returns one
success estimate in [0, 1] per query. The oracle reads the latent state the simulator stores in the payloads;
text predictors see only `serialize_query(query)`, the same kind of text a language-model critic reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from trace_rl.tree import RolloutTree
from trace_rl.types import Task, Turn

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Query:
    """What a predictor may read: a prompt and, for a prefix, its turns in order (empty for the prompt).

    Attributes:
        task: the prompt's `Task` (lab tasks carry their latent parameters in `metadata`).
        turns: the turns of the prefix, first to last; () queries the prompt itself.
    """

    task: Task
    turns: tuple[Turn, ...] = ()

    @property
    def depth(self) -> int:
        return len(self.turns)


def prompt_queries(tasks: Sequence[Task]) -> list[Query]:
    """One prompt-level query per task."""
    return [Query(task=t) for t in tasks]


def prefix_query(task: Task, tree: RolloutTree, node: int) -> Query:
    """The query for the prefix ending at `node` of `tree` (node 0: the prompt).

    Raises:
        ValueError: a node on the path has no `Turn` payload.
    """
    path: list[Turn] = []
    parent = tree.parent
    i = int(node)
    while i > 0:
        turn = tree.turn(i)
        if turn is None:
            raise ValueError(f"node {i} has no Turn payload; a prefix query needs the turns")
        path.append(turn)
        i = int(parent[i])
    return Query(task=task, turns=tuple(reversed(path)))


class Predictor(Protocol):
    """Success estimates for queries: `predict(queries) -> float64 (Q,)` in [0, 1]."""

    def predict(self, queries: Sequence[Query]) -> FloatArray: ...


def true_probability(query: Query) -> float:
    """The lab's known truth for a query: V_t of its last turn, or v0 of the prompt.

    Raises:
        ValueError: the query does not come from the lab (no latent state).
    """
    if query.turns:
        v = query.turns[-1].info.get("v")
    else:
        v = query.task.metadata.get("v0")
    if not isinstance(v, int | float):
        raise ValueError(f"query on task {query.task.id!r} carries no lab state (not a lab task?)")
    return float(v)


class OraclePredictor:
    """The true success probability of every query (an upper bound for any predictor)."""

    name = "oracle"

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        return np.asarray([true_probability(q) for q in queries], dtype=np.float64)


class NoisyOraclePredictor:
    """A calibrated noisy oracle: the posterior mean after `information` pseudo-rollouts of the query.

    p = (a + K) / (a + b + n),  K ~ Binomial(n, V), with V the true probability and Beta(a, b) the task family's
    prompt prior. At the prompt level this is exactly calibrated (E[V | p] = p) with mean squared error
    E[V (1 - V)] / (a + b + n); n = 0 is the constant prior mean. K is drawn fresh for every query.

    Args:
        information: n >= 0, pseudo-rollouts seen per query (larger = more accurate).
        prior_a, prior_b: the Beta prior (default: the lab family's Beta(0.4, 0.4)).
        seed: seed of the predictor's own generator.

    Raises:
        ValueError: negative information or non-positive prior parameters.
    """

    def __init__(self, information: int, *, prior_a: float = 0.4, prior_b: float = 0.4, seed: int = 0):
        if information < 0:
            raise ValueError(f"information must be >= 0 pseudo-rollouts; got {information}")
        if not (prior_a > 0 and prior_b > 0):
            raise ValueError("prior_a and prior_b must be positive")
        self.information = int(information)
        self.prior_a = float(prior_a)
        self.prior_b = float(prior_b)
        self.rng = np.random.default_rng(seed)
        self.name = f"noisy(n={self.information})"

    def from_truth(self, v: npt.ArrayLike) -> FloatArray:
        """Noisy estimates for true probabilities v (any shape)."""
        vv = np.asarray(v, dtype=np.float64)
        k = self.rng.binomial(self.information, vv)
        out = (self.prior_a + k) / (self.prior_a + self.prior_b + self.information)
        return np.asarray(out, dtype=np.float64)

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        return self.from_truth(np.asarray([true_probability(q) for q in queries], dtype=np.float64))


# ------------------------------------------------------------------------------------ learned predictors
@runtime_checkable
class TextPredictor(Protocol):
    """The shape of a learned predictor (trace_rl.predictor's SuccessPredictor): text in, estimates out."""

    def predict(self, texts: Sequence[str]) -> FloatArray: ...

    def update(self, texts: Sequence[str], targets: FloatArray) -> dict[str, float]: ...


def serialize_query(query: Query) -> str:
    """Text a learned predictor reads: the prompt, then one line per turn (action and observation).

    Uses only what an agent's context shows (task prompt, turn text, observation), never the latent state.
    """
    lines = [f"prompt: {query.task.prompt}"]
    lines.extend(f"{t.text} -> {t.observation}" for t in query.turns)
    return "\n".join(lines)


class TextPredictorAdapter:
    """Lets a `TextPredictor` answer lab queries and learn from lab trees.

    `predict` serialises each query with `serialize_query` and clips the answer into [0, 1] (a NaN answer is a
    ValueError). `update_from_trees` trains on every node's bottom-up value target (the paper's targets).
    """

    def __init__(self, model: TextPredictor, *, name: str = "learned"):
        if not isinstance(model, TextPredictor):
            raise ValueError("model must have predict(texts) and update(texts, targets) methods")
        self.model = model
        self.name = name

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        out = np.asarray(self.model.predict([serialize_query(q) for q in queries]), dtype=np.float64)
        if out.shape != (len(queries),):
            raise ValueError(f"the text predictor returned shape {out.shape} for {len(queries)} queries")
        if np.isnan(out).any():
            raise ValueError("the text predictor returned NaN")
        return np.clip(out, 0.0, 1.0)

    def update_from_trees(self, trees: Sequence[RolloutTree], tasks: Sequence[Task]) -> dict[str, float]:
        """One update on all nodes (prompt and prefixes, leaves excluded) of `trees` (tasks[i] is tree i's)."""
        texts: list[str] = []
        targets: list[float] = []
        for tree, task in zip(trees, tasks, strict=True):
            value = tree.value_targets()
            leaf = tree.is_leaf()
            for node in range(tree.num_nodes):
                if not leaf[node] and not np.isnan(value[node]):
                    texts.append(serialize_query(prefix_query(task, tree, node)))
                    targets.append(float(value[node]))
        return self.model.update(texts, np.asarray(targets, dtype=np.float64))


class TabularTextPredictor:
    """A minimal learned predictor: running mean of the targets seen for each exact text (prior 0.5).

    It memorises prompts and exact histories, no generalisation: a reference implementation of `TextPredictor`
    and a floor for real learned predictors.
    """

    def __init__(self, prior: float = 0.5):
        self.prior = float(prior)
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def predict(self, texts: Sequence[str]) -> FloatArray:
        return np.asarray(
            [self.sums[t] / self.counts[t] if t in self.counts else self.prior for t in texts],
            dtype=np.float64,
        )

    def update(self, texts: Sequence[str], targets: FloatArray) -> dict[str, float]:
        before = self.predict(texts)
        for t, y in zip(texts, np.asarray(targets, dtype=np.float64).tolist(), strict=True):
            self.sums[t] = self.sums.get(t, 0.0) + y
            self.counts[t] = self.counts.get(t, 0) + 1
        mse = float(np.mean((before - targets) ** 2)) if len(texts) else float("nan")
        return {"mse_before": mse, "examples": float(len(texts))}
