"""Time of the exact contrast-objective solver `allocate_contrast` (docs/allocation.md, "The contrast objective").

    python benchmarks/contrast_solver.py [--repeats 5] [--json]

One call per prompt and step, for a prompt whose roots are unanimous (the Pareto dynamic program; a mixed tree
is `allocate_prefixes`, timed in benchmarks/allocation.py). Workloads: the multistep shape of
benchmarks/prefix_ceiling.py (an all-failed tree with 35 anchors whose replays flip 0-10% of the time, 16
replays), 16 anchors x 32 replays (the exactness bound the issue names), token accounting (40 anchors, 64 cost
units, costs 1-8), trace_fresh's units (32 anchors at 4 units and the prompt at 8, 64 units), each at sibling
weight 1 (the default) and 0. Prints the median wall and CPU (`time.thread_time`) milliseconds per call and how
many anchors get replays, next to the paper's rule (`allocate_prefixes`) on the same input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from trace_rl.allocation import allocate_contrast, allocate_prefixes


def workloads(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, int, np.ndarray | None, np.ndarray]]:
    """name -> (q, budget, cost, sibling)."""
    out = {}
    q = 1.0 - rng.uniform(0.0, 0.1, 35)
    out["35 anchors, 16 replays (multistep, all failed)"] = (q, 16, None, np.ones(35, bool))
    q = 1.0 - rng.uniform(0.0, 0.3, 16)
    out["16 anchors, 32 replays"] = (q, 32, None, np.ones(16, bool))
    q = 1.0 - rng.uniform(0.0, 0.1, 40)
    out["40 anchors, 64 token units (costs 1-8)"] = (q, 64, rng.integers(1, 9, 40), np.ones(40, bool))
    q = np.r_[0.7, 1.0 - rng.uniform(0.0, 0.1, 32)]
    cost = np.r_[8, np.full(32, 4)]
    out["trace_fresh: prompt + 32 anchors, 64 units"] = (q, 64, cost, np.r_[False, np.ones(32, bool)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name, (q, budget, cost, sib) in workloads(np.random.default_rng(args.seed)).items():
        paper = allocate_prefixes(q, budget, cost=cost)
        for weight in (1.0, 0.0):
            wall, cpu = [], []
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), time.thread_time()
                k = allocate_contrast(q, budget, unanimous=True, sibling=sib, weight=weight, cost=cost)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
            rows.append(
                {
                    "workload": name,
                    "weight": weight,
                    "wall_ms": 1e3 * statistics.median(wall),
                    "cpu_ms": 1e3 * statistics.median(cpu),
                    "anchors_used": int((k > 0).sum()),
                    "anchors_used_paper": int((paper > 0).sum()),
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for r in rows:
        print(
            f"{r['workload']:46s} w={r['weight']:.0f}  wall {r['wall_ms']:7.1f} ms  cpu {r['cpu_ms']:7.1f} ms  "
            f"anchors with replays {r['anchors_used']:2d} (paper's rule {r['anchors_used_paper']:2d})"
        )


if __name__ == "__main__":
    main()
