"""BFCL reward parity: our env's reward vs bfcl-eval's official multi_turn_checker on the same calls.

    python benchmarks/bfcl_parity.py [--limit N] [--json]

For every BFCL v4 multi-turn task (800: base, long_context, miss_func, miss_param) the gold call trajectory and
its perturbations (`trace_rl.envs.bfcl_parity.perturbed_trajectories`) are scored three ways: the official
checker, the env with its default rule, and the env with ``strict_irrelevance=True``. Prints, per label,
the number of trajectories, how many the official checker accepts, and how many each env setting agrees on.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

from trace_rl.envs.bfcl import load_bfcl_tasks
from trace_rl.envs.bfcl_parity import env_reward, gold_calls, official_reward, perturbed_trajectories


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    disagreements = []
    for task in load_bfcl_tasks("all", limit=args.limit):
        for label, turns in perturbed_trajectories(gold_calls(task)):
            official = official_reward(task, turns)
            ours = env_reward(task, turns)
            strict = env_reward(task, turns, strict_irrelevance=True)
            for key in (label, "all perturbed" if label != "gold" else "all gold"):
                row = rows[key]
                row["n"] += 1
                row["official_pass"] += int(official == 1.0)
                row["agree_default"] += int(ours == official)
                row["agree_strict"] += int(strict == official)
            if ours != official:
                disagreements.append((task.id, label, official, ours))
    out = {
        "rows": {k: dict(v) for k, v in sorted(rows.items())},
        "disagreements_default": disagreements[:20],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if args.json:
        print(json.dumps(out))
        return
    print(f"{'label':22s} {'n':>6s} {'official pass':>14s} {'agree default':>14s} {'agree strict':>13s}")
    for label, row in out["rows"].items():
        print(
            f"{label:22s} {row['n']:6d} {row['official_pass']:14d} {row['agree_default']:14d} "
            f"{row['agree_strict']:13d}"
        )
    print(f"disagreements (default): {len(disagreements)}; {out['seconds']} s")


if __name__ == "__main__":
    main()
