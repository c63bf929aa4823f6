"""Paired learning-curve table of finished runs, read from their logs: ``DIR/<label>/seed_<s>/metrics.jsonl``
(or ``metrics.jsonl.gz``, as the logs kept in results/ are).

The same numbers `trace-rl compare` writes to comparison.json (`trace_rl.metrics.curves`: final accuracy = mean of
the last two held-out evaluations, AUC over the range of spend every run covers, reach = the spend at which a run
first crosses the same seed's baseline final accuracy, as a share of the baseline's spend), for runs that were
made in pieces: seeds added in a later session by `scripts/compare_seeds.py`, or logs kept after their checkpoints
were deleted (compare itself only reads back runs whose checkpoints are there).

    python scripts/paired_runs.py runs/c22 --baseline grpo3 --methods trace3,pcl3 --seeds 0,1,2,3,4

Prints one row per method and seed, then the paired differences against the baseline with their 95% Student-t
intervals over the seeds where both runs exist. Exit status 2 when a named run has no log.

With ``--prefix-stats`` it adds what the prefix stage bought (`trace_rl.metrics.report.prefix_stage_stats`): per
run the share of mixed sibling groups, replay flips per replay and per 1,000 generated tokens, their paired
intervals, and per method a table by anchor depth pooled over the seeds (replays, flips, flips per replay, flips
per 1,000 tokens the replays from that depth sampled).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from trace_rl.metrics.curves import curve_summaries, learning_curve, paired_interval, run_cost, summary_keys
from trace_rl.metrics.report import prefix_stage_stats
from trace_rl.train.compare import parse_seeds
from trace_rl.train.rundir import read_metrics, summarize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="folder holding <label>/seed_<s>/metrics.jsonl")
    p.add_argument("--baseline", required=True, help="label of the baseline runs (paired against)")
    p.add_argument("--methods", required=True, help="comma-separated labels to compare with the baseline")
    p.add_argument("--seeds", required=True, help="comma-separated seeds, e.g. 0,1,2,3,4")
    p.add_argument(
        "--prefix-stats",
        action="store_true",
        help="also the prefix stage's numbers: mixed sibling groups, flips per replay and per token, by depth",
    )
    args = p.parse_args(argv)
    labels = [
        args.baseline,
        *(m.strip() for m in args.methods.split(",") if m.strip() and m != args.baseline),
    ]
    if len(labels) < 2:
        p.error("--methods names no label besides the baseline")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        p.error(str(exc))
    logs = {}
    for label in labels:
        for seed in seeds:
            plain = args.dir / label / f"seed_{seed}" / "metrics.jsonl"
            packed = plain.with_name("metrics.jsonl.gz")  # logs kept in results/ are compressed
            path = plain if plain.exists() else packed
            if not path.exists():
                print(f"no log: neither {plain} nor {path.name} there", file=sys.stderr)
                return 2
            try:
                logs[label, seed] = read_metrics(path)
            except (OSError, EOFError, UnicodeDecodeError) as exc:  # a corrupt .gz
                print(f"unreadable log {path}: {exc}", file=sys.stderr)
                return 2
            if not any(r.get("kind") == "eval" for r in logs[label, seed]):
                print(f"no held-out evaluation in {path}: nothing to summarise", file=sys.stderr)
                return 2
    # curve_summaries indexes seeds by position: position i is seeds[i] for every label
    curves = {label: [learning_curve(logs[label, s]) for s in seeds] for label in labels}
    axes = ("rollouts", "tokens")
    per_axis = {axis: curve_summaries(curves, args.baseline, axis) for axis in axes}
    columns: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    for label in labels:
        cols = columns[label]
        cols["final"] = [row["final_accuracy"] for row in per_axis["rollouts"][label]]
        for axis in axes:
            auc, _, share = summary_keys(axis)
            cols[f"auc_{axis}"] = [row[auc] for row in per_axis[axis][label]]
            cols[f"reach_{axis}"] = [row[share] for row in per_axis[axis][label]]
        cols["effective_ratio"] = [summarize(logs[label, s]).get("effective_ratio", math.nan) for s in seeds]
        costs = [run_cost(logs[label, s]) for s in seeds]
        for name, key in (("tokens", "tokens_generated_total"), ("rollouts", "rollouts_generated_total")):
            cols[name] = [cost.get(key, math.nan) for cost in costs]
        cols["steps"] = [cost.get("steps", math.nan) for cost in costs]
        if args.prefix_stats:
            stats = [prefix_stage_stats(logs[label, s]) for s in seeds]
            for key in PREFIX_KEYS:
                cols[key] = [float(st[key]) for st in stats]
    names = list(columns[args.baseline])
    print("label seed " + " ".join(names))
    for label in labels:
        for i, seed in enumerate(seeds):
            print(f"{label} {seed} " + " ".join(_fmt(columns[label][n][i]) for n in names))
    print(f"paired against {args.baseline} (mean [95% t-interval], n seeds):")
    for label in labels[1:]:
        for n in (
            "final",
            "auc_rollouts",
            "auc_tokens",
            "effective_ratio",
            *(PREFIX_KEYS if args.prefix_stats else ()),
        ):
            mean, half, k = paired_interval(columns[label][n], columns[args.baseline][n])
            interval = (
                f"[{mean - half:+.3f}, {mean + half:+.3f}]"
                if math.isfinite(half)
                else ("(one seed)" if k == 1 else "(no seed where both are finite)")
            )
            print(f"{label} - {args.baseline} {n}: {mean:+.3f} {interval} n={k}")
    if args.prefix_stats:
        print("by anchor depth, pooled over seeds: replays flips flips_per_replay flips_per_1k_replay_tokens")
        for label in labels:  # the steps of all seeds as one log: prefix_stage_stats sums over steps
            every = [r for seed in seeds for r in logs[label, seed]]
            for d, st in prefix_stage_stats(every)["by_depth"].items():
                rate, per_k = _fmt(st["flip_rate"]), _fmt(st["flips_per_1k_tokens"])
                print(f"{label} depth {d}: {st['replays']:.0f} {st['flips']:.0f} {rate} {per_k}")
    return 0


# per-run numbers of the prefix stage that get a paired interval (prefix_stage_stats keys)
PREFIX_KEYS = ("mixed_sibling_share", "replay_flip_rate", "flips_per_1k_tokens")


def _fmt(x: float) -> str:
    """Counts and large numbers without decimals, rates with three."""
    return f"{x:.0f}" if math.isfinite(x) and (x == int(x) or abs(x) >= 100) else f"{x:.3f}"


if __name__ == "__main__":
    sys.exit(main())
