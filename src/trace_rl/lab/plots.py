"""PNG figures of the lab (matplotlib, Agg backend): effective ratio vs budget, allocation vs budget, replay depths.

Each figure's data comes from a pure function (`effective_ratio_vs_budget`, `allocation_vs_budget`,
`replay_depths`) so the numbers can be inspected or tested without drawing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from trace_rl.allocation import METHODS, BudgetShape
from trace_rl.lab.predictors import NoisyOraclePredictor, OraclePredictor, Predictor
from trace_rl.lab.simulator import TaskFamily, sample_pool
from trace_rl.lab.step import method_step
from trace_rl.metrics import replay_depth_histogram

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PLOT_METHODS = ("grpo", "pcl", "knapsack", "treepo", "trace_root_only", "trace_prefix_only", "trace")
ROOT_BUDGETS = (32, 64, 128, 256)


def _predictor(noise: int | None, seed: int) -> Predictor:
    return OraclePredictor() if noise is None else NoisyOraclePredictor(noise, seed=seed)


def effective_ratio_vs_budget(
    *,
    methods: Sequence[str] = PLOT_METHODS,
    roots: Sequence[int] = ROOT_BUDGETS,
    continuations: int = 2,
    seeds: int = 4,
    noise: int | None = None,
    family: TaskFamily | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Mean effective ratio of each method at shapes (M, N) for M in `roots` (pool = 4 flat batches).

    Returns:
        (budgets, ratio): float64 (len(roots),) costs M (1 + N/2) and float64 (len(methods), len(roots)).
    """
    fam = family or TaskFamily()
    shapes = [BudgetShape(m, continuations) for m in roots]
    ratio = np.zeros((len(methods), len(shapes)))
    for b, shape in enumerate(shapes):
        for s in range(seeds):
            pool = sample_pool(fam, 4 * shape.batch_size, np.random.default_rng((s, b, 11)))
            for k, name in enumerate(methods):
                res = method_step(
                    METHODS[name], _predictor(noise, s), pool, shape, np.random.default_rng((s, b, 12))
                )
                ratio[k, b] += res.effective_ratio / seeds
    return np.asarray([s.total for s in shapes]), ratio


def allocation_vs_budget(
    pool_size: int = 48, roots: Sequence[int] = tuple(range(8, 257, 8)), seed: int = 0
) -> tuple[FloatArray, IntArray]:
    """TRACE's root allocation over one fixed pool as M grows (shape (M, 2), max_active = batch).

    Returns:
        (v0 sorted ascending, float64 (P,); rollouts, int64 (P, len(roots))) with prompts in that order.
    """
    pool = sample_pool(TaskFamily(), pool_size, np.random.default_rng((seed, 13)))
    order = np.argsort(pool.v0)
    alloc = np.zeros((pool_size, len(roots)), dtype=np.int64)
    for b, m in enumerate(roots):
        shape = BudgetShape(m, 2)
        plan = METHODS["trace"].roots(pool.v0, shape, np.random.default_rng(0))
        alloc[:, b] = plan.rollouts[order]
    return pool.v0[order], alloc


def replay_depths(
    methods: Sequence[str] = ("treepo", "trace_prefix_only", "trace"),
    shape: BudgetShape | None = None,
    seeds: int = 4,
    max_depth: int = 12,
) -> IntArray:
    """Replays per anchor depth (0..max_depth) of each method, summed over seeds: int64 (len(methods), D+1)."""
    shp = shape or BudgetShape(128, 2)
    out = np.zeros((len(methods), max_depth + 1), dtype=np.int64)
    for s in range(seeds):
        pool = sample_pool(TaskFamily(), 4 * shp.batch_size, np.random.default_rng((s, 14)))
        for k, name in enumerate(methods):
            res = method_step(METHODS[name], OraclePredictor(), pool, shp, np.random.default_rng((s, 15)))
            out[k] += replay_depth_histogram(res.trees, max_depth=max_depth)
    return out


def write_plots(out_dir: str | os.PathLike[str], *, seeds: int = 4) -> list[str]:
    """Write the three lab figures as PNGs into `out_dir` (created if missing); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths: list[str] = []

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, noise in zip(axes, (None, 8), strict=True):
        budgets, ratio = effective_ratio_vs_budget(seeds=seeds, noise=noise)
        for k, name in enumerate(PLOT_METHODS):
            ax.plot(budgets, ratio[k], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("budget per step (rollout-equivalents, M (1 + N/2), N = 2)")
        ax.set_title("oracle predictor" if noise is None else f"noisy oracle (information {noise})")
    axes[0].set_ylabel("effective ratio")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"Effective ratio vs budget (lab, mean of {seeds} pools)")
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "effective_ratio_vs_budget.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    roots = tuple(range(8, 257, 8))
    v0, alloc = allocation_vs_budget(roots=roots)
    fig, ax = plt.subplots(figsize=(10, 6))
    im = ax.imshow(alloc, aspect="auto", origin="lower", cmap="viridis", interpolation="nearest")
    ax.set_xticks(range(0, len(roots), 4), [str(roots[i]) for i in range(0, len(roots), 4)])
    step = max(1, len(v0) // 12)
    ax.set_yticks(range(0, len(v0), step), [f"{v0[i]:.2f}" for i in range(0, len(v0), step)])
    ax.set_xlabel("root budget M (shape (M, 2))")
    ax.set_ylabel("prompt, by true success v0")
    ax.set_title("TRACE root allocation over a 48-prompt pool as the budget grows")
    fig.colorbar(im, ax=ax, label="root rollouts m_i")
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "allocation_vs_budget.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    methods = ("treepo", "trace_prefix_only", "trace")
    hist = replay_depths(methods, seeds=seeds)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(methods)
    for k, name in enumerate(methods):
        share = hist[k] / max(int(hist[k].sum()), 1)
        ax.bar(np.arange(hist.shape[1]) + k * width, share, width=width, label=name)
    ax.set_xlabel("anchor depth (turns)")
    ax.set_ylabel("share of replays")
    ax.set_title("Where replays start (128x2, oracle)")
    ax.legend()
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "replay_depths.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
