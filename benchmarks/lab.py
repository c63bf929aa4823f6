"""Speed of the allocation lab: the whole `trace-rl lab claims` run, simulator throughput, one step per method.

    python benchmarks/lab.py [--repeats 3] [--json]

Prints medians: the claims run at its defaults (10 seeds x 2 pools; goal: under 60 s), simulated rollouts per
second (root rollouts of a 1024-prompt pool, trees included) and the time of one step of each method at the
(128, 2) shape with the oracle predictor.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

from trace_rl.allocation import METHODS
from trace_rl.lab import SHAPES, OraclePredictor, TaskFamily, method_step, rollout_trees, sample_pool


def timed(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict[str, float] = {}

    cmd = [sys.executable, "-m", "trace_rl.cli.main", "lab", "claims", "--json"]
    out["claims_run_s"] = timed(lambda: subprocess.run(cmd, check=True, capture_output=True), args.repeats)

    rng = np.random.default_rng(0)
    pool = sample_pool(TaskFamily(), 1024, rng)
    counts = np.full(1024, 4)

    def rollouts() -> None:
        rollout_trees(pool, np.arange(1024), counts, rng)

    out["rollouts_per_s"] = 4096 / timed(rollouts, args.repeats)

    shape = SHAPES["128x2"]
    step_pool = sample_pool(TaskFamily(), 4 * shape.batch_size, rng)
    for name, method in METHODS.items():
        out[f"step_128x2_{name}_ms"] = 1000 * timed(
            lambda m=method: method_step(m, OraclePredictor(), step_pool, shape, np.random.default_rng(1)),
            max(args.repeats, 5),
        )
    if args.json:
        print(json.dumps(out))
        return
    for k, v in out.items():
        print(f"{k:40s} {v:10.2f}")


if __name__ == "__main__":
    main()
