"""Speed of tree building, value targets, advantages, the token broadcast and save/load (prints numbers).

One "step" = 256 trees, each with 8 root rollouts of 6 turns and 16 replays from random anchors, every turn
carrying 64 tokens. Run: `.venv/bin/python benchmarks/trees.py [--repeats 5]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trace_rl.advantages import grpo_advantages, token_advantages, tree_grpo_advantages, treerpo_advantages
from trace_rl.metrics import tree_metrics
from trace_rl.tree import RolloutTree
from trace_rl.types import Turn


def build(rng: np.random.Generator, turn: Turn) -> RolloutTree:
    t = RolloutTree.new()
    for _ in range(8):
        t.add_rollout([turn] * 6, float(rng.integers(0, 2)))
    anchors = [a.node for a in t.anchors()]
    for _ in range(16):
        a = int(rng.choice(anchors))
        t.add_replay(a, [turn] * int(6 - t.depth[a]), float(rng.integers(0, 2)))
    return t


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trees", type=int, default=256)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = 64
    turn = Turn(np.arange(n, dtype=np.int64), np.ones(n, np.int8), np.zeros(n, np.float32))
    trees: list[RolloutTree] = []

    def build_all() -> None:
        trees[:] = [build(rng, turn) for _ in range(args.trees)]

    rows = [("build (add_rollout/add_replay)", median_ms(build_all, args.repeats))]

    def fresh(fn: Callable[[RolloutTree], object]) -> Callable[[], object]:
        # Rebuild from arrays so that cached properties do not hide the cost.
        copies = [RolloutTree.from_parents(t.parent, t.reward, t.turns, is_replay=t.is_replay) for t in trees]
        return lambda: [fn(t) for t in copies]

    rows += [
        ("value_targets (uncached)", median_ms(fresh(lambda t: t.value_targets()), 1)),
        ("grpo_advantages", median_ms(lambda: [grpo_advantages(t) for t in trees], args.repeats)),
        ("tree_grpo_advantages", median_ms(lambda: [tree_grpo_advantages(t) for t in trees], args.repeats)),
        ("treerpo_advantages", median_ms(lambda: [treerpo_advantages(t) for t in trees], args.repeats)),
        (
            "token_advantages (per_path)",
            median_ms(lambda: [token_advantages(t, grpo_advantages(t)) for t in trees], args.repeats),
        ),
        ("tree_metrics", median_ms(lambda: tree_metrics(trees), args.repeats)),
    ]
    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d) / f"{i}.json" for i in range(len(trees))]
        rows.append(
            ("save (JSON)", median_ms(lambda: [t.save(p) for t, p in zip(trees, paths, strict=True)], 1))
        )
        rows.append(("load (JSON)", median_ms(lambda: [RolloutTree.load(p) for p in paths], 1)))
    nodes = sum(t.num_nodes for t in trees)
    print(f"{len(trees)} trees, {nodes} nodes, {nodes * n} tokens; median ms over {args.repeats} repeats")
    for name, ms in rows:
        print(f"  {name:32s} {ms:9.1f} ms")


if __name__ == "__main__":
    main()
