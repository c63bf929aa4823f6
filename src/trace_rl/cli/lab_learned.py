"""The project's learned predictor (`trace_rl.predictor`) on the allocation lab (`trace_rl.lab`).

This glue lives in the CLI layer because the lab must not import the predictor (no torch in the lab) and the
predictor must not import the lab (import-linter contracts in pyproject.toml). It uses the predictor exactly as
the trainer does: anchors are serialized with `serialize_anchor` at the predictor's `max_chars`, training examples
come from `node_examples` on the step's `RolloutTree`s, and `OnlineTrainer.observe_step` trains after each step.

Three pieces (docs/predictor.md, "Error by depth on the lab"):

- `LearnedLabPredictor`: a lab `Predictor` (answers `Query` records) backed by a `SuccessPredictor`.
- `train_on_lab`: `steps` steps of a method (`trace_rl.lab.method_step`) with the learned predictor plugged in,
  training it online on each step's trees.
- `depth_table` / `depth_rows`: error by depth (`trace_rl.predictor.metrics.error_by_depth`) on fresh held-out lab
  trees, against the trees' bottom-up targets and against the lab's true probabilities, next to the constant 0.5
  and the oracle.
- `ratio_comparison`: TRACE's effective ratio with the (frozen) learned predictor vs the oracle and vs TreePO on
  the same pools (paired), with 95% CIs over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import METHODS
from trace_rl.cli.common import UsageError
from trace_rl.lab import (
    SHAPES,
    OraclePredictor,
    Predictor,
    Query,
    TaskFamily,
    method_step,
    node_state,
    prefix_query,
    rollout_trees,
    sample_pool,
)
from trace_rl.lab.claims import POOL_FACTOR
from trace_rl.metrics.intervals import mean_ci
from trace_rl.predictor import NodeExample, OnlineConfig, OnlineTrainer, SuccessPredictor, node_examples
from trace_rl.predictor.metrics import error_by_depth, mse, spearman
from trace_rl.predictor.serialize import serialize_anchor

FloatArray = npt.NDArray[np.float64]

#: Online schedule used on the lab (ours; docs/predictor.md says why it differs from the trainer's default).
LAB_ONLINE = OnlineConfig(batch_size=32, prefix_share=0.5, passes=8.0, buffer_steps=4, evaluate=False)


class LearnedLabPredictor:
    """A lab `Predictor` backed by a project `SuccessPredictor` (text in, estimate out).

    Each query is serialized with `serialize_anchor(task.prompt, turns, max_chars=model.max_chars)`, the same
    string `node_examples` produces for that node, so the model scores exactly the texts it is trained on.
    """

    def __init__(self, model: SuccessPredictor):
        self.model = model
        self.name = f"learned:{model.name}"

    def texts(self, queries: Sequence[Query]) -> list[str]:
        return [serialize_anchor(q.task.prompt, q.turns, max_chars=self.model.max_chars) for q in queries]

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        if not queries:
            return np.zeros(0, dtype=np.float64)
        out = np.asarray(self.model.predict(self.texts(queries)), dtype=np.float64)
        return np.clip(out, 0.0, 1.0)


class ConstantPredictor:
    """The same estimate for every query (0.5: the lab family's prior mean, and a cold predictor's answer)."""

    def __init__(self, value: float = 0.5):
        self.value = float(value)
        self.name = f"constant {self.value:g}"

    def predict(self, queries: Sequence[Query]) -> FloatArray:
        return np.full(len(queries), self.value)


def _shape(name: str) -> Any:
    if name not in SHAPES:
        raise UsageError(f"unknown shape {name!r}; choose one of {', '.join(SHAPES)}")
    return SHAPES[name]


def train_on_lab(
    model: SuccessPredictor,
    *,
    steps: int,
    method: str = "trace",
    shape: str = "64x2",
    seed: int = 0,
    online: OnlineConfig = LAB_ONLINE,
    family: TaskFamily | None = None,
) -> list[dict[str, float]]:
    """Run `steps` lab steps of `method` with `model` plugged in, training it online after each step.

    Step j draws a fresh candidate pool (POOL_FACTOR flat batches) with generator (seed, 0, j) and runs
    `method_step` with generator (seed, 1, j); every tree's nodes (prompt and non-leaf prefixes, bottom-up
    targets) go to `OnlineTrainer.observe_step`. A cold model answers 0.5 everywhere, so the first step's roots are
    uniform in effect.

    Returns:
        One dict per step: "effective_ratio", "examples", "prompt_examples", plus the trainer's `predictor/...`
        metrics (updates, train_loss, seconds).

    Raises:
        ValueError: steps < 1, an unknown method or shape.
    """
    if steps < 1:
        raise UsageError(f"steps must be at least 1; got {steps}")
    if method not in METHODS:
        raise UsageError(f"unknown method {method!r}")
    budget = _shape(shape)
    fam = family or TaskFamily()
    adapter = LearnedLabPredictor(model)
    trainer = OnlineTrainer(model, online)
    log: list[dict[str, float]] = []
    for j in range(steps):
        pool = sample_pool(fam, POOL_FACTOR * budget.batch_size, np.random.default_rng((seed, 0, j)))
        res = method_step(METHODS[method], adapter, pool, budget, np.random.default_rng((seed, 1, j)))
        examples: list[NodeExample] = []
        for i, tree in zip(res.prompts.tolist(), res.trees, strict=True):
            examples += node_examples(tree, pool.tasks[i].prompt, max_chars=model.max_chars)
        metrics = trainer.observe_step(examples)
        metrics["effective_ratio"] = res.effective_ratio
        metrics["examples"] = float(len(examples))
        metrics["prompt_examples"] = float(sum(not e.is_prefix for e in examples))
        log.append(metrics)
    return log


@dataclass(frozen=True)
class DepthTable:
    """Every non-leaf node of held-out lab trees with its target, truth and the predictors' estimates.

    Attributes:
        depth: int64 (n,), turns in the prefix (0 = prompt).
        target: float64 (n,), bottom-up value target (mean reward of the leaves below the node).
        truth: float64 (n,), the lab's true success probability of the prefix.
        predictions: predictor name -> float64 (n,).
    """

    depth: npt.NDArray[np.int64]
    target: FloatArray
    truth: FloatArray
    predictions: dict[str, FloatArray]


def depth_table(
    predictors: Mapping[str, Predictor],
    *,
    prompts: int = 48,
    rollouts: int = 4,
    seed: int = 1000,
    family: TaskFamily | None = None,
) -> DepthTable:
    """Score every non-leaf node of fresh lab trees (`rollouts` root rollouts of `prompts` new prompts).

    The pool comes from generator (seed, 2); training uses (seed', 0, j) generators, so with a different seed the
    trees (and the prompts' latent parameters) are held out. Prompt texts repeat across pools by design of the lab
    ("lab task lab-<i>" carries no information about the prompt's difficulty).

    Raises:
        ValueError: prompts or rollouts < 1.
    """
    if prompts < 1 or rollouts < 1:
        raise UsageError("prompts and rollouts must be at least 1")
    fam = family or TaskFamily()
    rng = np.random.default_rng((seed, 2))
    pool = sample_pool(fam, prompts, rng)
    trees = rollout_trees(pool, np.arange(prompts), np.full(prompts, rollouts, dtype=np.int64), rng)
    queries: list[Query] = []
    depth: list[int] = []
    target: list[float] = []
    truth: list[float] = []
    for i, tree in enumerate(trees):
        value = tree.value_targets()
        leaf = tree.is_leaf()
        for node in range(tree.num_nodes):
            if leaf[node]:
                continue
            queries.append(prefix_query(pool.tasks[i], tree, node))
            depth.append(int(tree.depth[node]))
            target.append(float(value[node]))
            truth.append(node_state(tree, node))
    preds = {name: np.asarray(p.predict(queries), dtype=np.float64) for name, p in predictors.items()}
    return DepthTable(
        depth=np.asarray(depth, dtype=np.int64),
        target=np.asarray(target),
        truth=np.asarray(truth),
        predictions=preds,
    )


def depth_rows(table: DepthTable, *, max_depth: int = 6) -> list[dict[str, Any]]:
    """Per depth 0..max_depth (deeper nodes pooled into the last row as ">= max_depth"): count, and for every
    predictor the MSE against the targets, the MSE against the truth and the Spearman correlation with the
    targets (`error_by_depth`). Two extra rows: "prompt" (depth 0) and "prefix" (all depths >= 1)."""
    d = np.minimum(table.depth, max_depth)
    rows: list[dict[str, Any]] = []
    by_target = {k: error_by_depth(p, table.target, d) for k, p in table.predictions.items()}
    by_truth = {k: error_by_depth(p, table.truth, d) for k, p in table.predictions.items()}
    for level in sorted(set(d.tolist())):
        row: dict[str, Any] = {"depth": f">={level}" if level == max_depth else str(level)}
        first = next(iter(by_target.values()))
        row["count"] = first[level].count
        for k in table.predictions:
            row[f"{k}/mse_target"] = by_target[k][level].mse
            row[f"{k}/mse_truth"] = by_truth[k][level].mse
            row[f"{k}/spearman_target"] = by_target[k][level].spearman
        rows.append(row)
    for label, sel in (("prompt", table.depth == 0), ("prefix", table.depth > 0)):
        row = {"depth": label, "count": int(sel.sum())}
        for k, p in table.predictions.items():
            row[f"{k}/mse_target"] = mse(p[sel], table.target[sel])
            row[f"{k}/mse_truth"] = mse(p[sel], table.truth[sel])
            row[f"{k}/spearman_target"] = spearman(p[sel], table.target[sel])
        rows.append(row)
    return rows


@dataclass(frozen=True)
class RatioComparison:
    """Per-seed effective ratios of each arm (label -> float64 (seeds,)) on paired pools."""

    shape: str
    ratio: dict[str, FloatArray]

    def summary(self, learned: str = "trace/learned", oracle: str = "trace/oracle") -> dict[str, Any]:
        """Mean and 95% CI of every arm, and of each arm's share of the oracle's TRACE ratio (ratio / oracle)."""
        out: dict[str, Any] = {"shape": self.shape, "seeds": len(next(iter(self.ratio.values())))}
        for label, r in self.ratio.items():
            out[label] = mean_ci(r).as_dict()
            out[f"{label}/share_of_oracle"] = mean_ci(r / self.ratio[oracle]).as_dict()
        if "treepo" in self.ratio:
            out[f"{learned}-treepo"] = mean_ci(self.ratio[learned] - self.ratio["treepo"]).as_dict()
        return out


def ratio_comparison(
    learned: Predictor,
    *,
    seeds: int = 6,
    shape: str = "128x2",
    base_seed: int = 500,
    family: TaskFamily | None = None,
) -> RatioComparison:
    """Effective ratio at equal budget of TreePO, TRACE with the oracle, TRACE and prefix-only TRACE with `learned`.

    Seed s draws one pool (generator (base_seed, s, size)); every arm runs one `method_step` on it with the same
    step generator (base_seed, s, size, 1), so differences are paired. `learned` is not trained here (frozen).

    Raises:
        ValueError: seeds < 2 or an unknown shape.
    """
    if seeds < 2:
        raise UsageError(f"seeds must be at least 2 for a confidence interval; got {seeds}")
    budget = _shape(shape)
    fam = family or TaskFamily()
    arms: list[tuple[str, str, Predictor]] = [
        ("treepo", "treepo", ConstantPredictor()),
        ("trace/oracle", "trace", OraclePredictor()),
        ("trace/learned", "trace", learned),
        ("trace_prefix_only/learned", "trace_prefix_only", learned),
    ]
    ratio = {label: np.zeros(seeds) for label, _, _ in arms}
    size = POOL_FACTOR * budget.batch_size
    for s in range(seeds):
        pool = sample_pool(fam, size, np.random.default_rng((base_seed, s, size)))
        for label, method, pred in arms:
            rng = np.random.default_rng((base_seed, s, size, 1))
            ratio[label][s] = method_step(METHODS[method], pred, pool, budget, rng).effective_ratio
    return RatioComparison(shape=shape, ratio=ratio)
