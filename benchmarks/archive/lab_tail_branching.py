"""Tail branching (branpo) against the other prefix rules on the lab's known-truth simulator, at equal budget.

Per seed one candidate pool (4 flat batches) and one step of each method on it, the oracle predictor for the
predictor-driven ones; prints the mean tree-level effective ratio and the share of replays whose outcome differs
from their rollout's (flips per replay), with paired differences against `branpo` (mean and a 95% normal
interval over seeds). Numbers, not a timed test.

    python benchmarks/archive/lab_tail_branching.py [--seeds 50] [--shape 64x2]
"""

from __future__ import annotations

import argparse

import numpy as np

from trace_rl.allocation import METHODS
from trace_rl.lab import SHAPES, OraclePredictor, TaskFamily, method_step, sample_pool
from trace_rl.lab.claims import POOL_FACTOR

ARMS = ("treepo", "branpo", "trace_prefix_only", "trace")


def flips_per_replay(trees) -> float:  # type: ignore[no-untyped-def]
    flips = replays = 0
    for tree in trees:
        leaf = tree.chain_leaf()
        for p in tree.paths():
            end = int(p[-1])
            if not tree.is_replay[end]:
                continue
            start = int(p[np.argmax(tree.is_replay[p])] if tree.is_replay[p].any() else end)
            anchor = int(tree.parent[start])
            replays += 1
            flips += abs(float(tree.reward[end]) - float(tree.reward[int(leaf[anchor])])) > 1e-6
    return flips / replays if replays else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--shape", default="64x2", choices=sorted(SHAPES))
    args = ap.parse_args()
    shape = SHAPES[args.shape]
    ratio = {m: [] for m in ARMS}
    flips = {m: [] for m in ARMS}
    for seed in range(args.seeds):
        pool = sample_pool(TaskFamily(), POOL_FACTOR * shape.batch_size, np.random.default_rng((seed, 1)))
        for m in ARMS:
            res = method_step(METHODS[m], OraclePredictor(), pool, shape, np.random.default_rng((seed, 2)))
            assert abs(res.spent(shape) - shape.total) < 1e-9, (m, res.spent(shape))
            ratio[m].append(res.effective_ratio)
            flips[m].append(flips_per_replay(res.trees))
    print(f"lab, shape {args.shape} (budget {shape.total:g} rollout-equivalents a step), {args.seeds} seeds")
    print(f"{'method':<18} {'effective ratio':>16} {'- branpo [95%]':>24} {'flips/replay':>13}")
    base = np.asarray(ratio["branpo"])
    for m in ARMS:
        r = np.asarray(ratio[m])
        d = r - base
        half = 1.96 * d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else float("nan")
        diff = f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"
        print(f"{m:<18} {r.mean():>16.3f} {diff:>24} {np.nanmean(flips[m]):>13.3f}")


if __name__ == "__main__":
    main()
