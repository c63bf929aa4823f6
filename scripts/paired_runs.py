"""Paired learning-curve table of finished runs, read from their logs: ``DIR/<label>/seed_<s>/metrics.jsonl``
(or ``metrics.jsonl.gz``, as the logs kept in results/ are).

The same numbers `trace-rl compare` writes to comparison.json (`trace_rl.metrics.curves`: final accuracy = mean of
the last two held-out evaluations, AUC over the range of spend every run covers, reach = the spend at which a run
first crosses the same seed's baseline final accuracy, as a share of the baseline's spend), for runs that were
made in pieces: seeds added in a later session by `scripts/compare_seeds.py`, or logs kept after their checkpoints
were deleted (compare itself only reads back runs whose checkpoints are there).

    python scripts/paired_runs.py runs/c22 --baseline grpo3 --methods trace3,pcl3 --seeds 0,1,2,3,4

Prints one row per method and seed, then the paired differences against the baseline with their 95% Student-t
intervals and 95% bootstrap intervals (`trace_rl.metrics.intervals.stratified_bootstrap_ci`, one stratum) over
the seeds where both runs exist. Columns besides the final accuracy, AUCs and reach (share of the baseline's whole
run): ``reach_x_<axis>``, the spend to the baseline's final as a share of the baseline's OWN first crossing of its
final; ``final_matched``, the accuracy at the rollout-equivalents of the baseline's final evaluations ("-" where
the run does not cover them, e.g. a dapo run that stopped short: flagged, not guessed); ``probe``, the warm
start's probe rollouts charged to the run (0 for a method that does not read the predictor).

Before anything is computed the runs are checked against their config.json (`trace_rl.train.provenance`): every
run must be finished (`trace_rl.train.rundir.log_finished`; ``--allow-partial`` includes unfinished ones, named),
the runs of one seed must have started from one warm start (their recorded ``warm_start_hash``), every run must have
run the code its baseline run of the same seed ran, on a clean tree (``provenance.code_commit`` and
``code_dirty``, the commits that resumed it included; ``--allow-mixed-commits`` pairs them anyway and prints each
run's commits), and all runs must share the task data and evaluation keys (`trace_rl.train.compare_shared.SHARED_KEYS`). A refusal is one line naming the
runs, exit status 2. Runs whose config.json predates provenance (no ``provenance`` block, e.g. results/c22 and
c23) have an unknown commit and warm start: they are named on stderr and not refused for it. Exit status 2 also
when a named run has no log.

With ``--prefix-stats`` it adds what the prefix stage bought (`trace_rl.metrics.prefix_stage.prefix_stage_stats`):
per run the share of mixed sibling groups, replay flips per replay and per 1,000 generated tokens, their paired
intervals, and per method a table by anchor depth pooled over the seeds (replays, flips, flips per replay, flips
per 1,000 tokens the replays from that depth sampled).

With ``--step-stats`` it adds where each step's budget went (`trace_rl.metrics.curves.step_means` over the training
records, and their sums over the run): per step the prompts trained on (``active_prompts``), root rollouts,
replays, rollouts generated, groups trained, paths in the update and tokens generated; per run the prompts trained
on in all (``active_prompts_total``). At equal generated budget a tree method trains on fewer prompts per step than
a flat one (a replay costs budget that a new prompt's rollouts would have): this says by how many.

With ``--plot DIR`` it also draws the learning curves it summarised (`trace_rl.metrics.plots.learning_curve_plot`,
as `trace-rl report` draws a compare folder's): held-out pass@1 against generated rollouts
(``DIR/accuracy_vs_rollouts.png``) and against generated tokens (``DIR/accuracy_vs_tokens.png``), per method the
mean over the seeds with its pointwise 95% band and every seed's evaluations as points, and against
rollout-equivalents, the budget's unit (``DIR/accuracy_vs_rollout_eq.png``: a replay counts 1/2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import NamedTuple

from trace_rl.metrics.curves import (
    MATCHED_KEYS,
    crossing_keys,
    curve_summaries,
    learning_curve,
    matched_finals,
    paired_interval,
    run_cost,
    step_means,
    summary_keys,
)
from trace_rl.metrics.intervals import stratified_bootstrap_ci
from trace_rl.metrics.plots import AXIS_LABELS, learning_curve_plot
from trace_rl.metrics.prefix_stage import prefix_stage_stats
from trace_rl.metrics.summary import train_records
from trace_rl.train.compare import BOOTSTRAP_MIN_PAIRS, parse_seeds
from trace_rl.train.compare_shared import shared_differences
from trace_rl.train.provenance import PROVENANCE_KEY, provenance_of
from trace_rl.train.rundir import log_finished, read_metrics, summarize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="folder holding <label>/seed_<s>/metrics.jsonl")
    p.add_argument("--baseline", required=True, help="label of the baseline runs (paired against)")
    p.add_argument("--methods", required=True, help="comma-separated labels to compare with the baseline")
    p.add_argument("--seeds", required=True, help="comma-separated seeds, e.g. 0,1,2,3,4")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="include unfinished runs (named on stderr) instead of refusing; their finals are not comparable",
    )
    p.add_argument(
        "--allow-mixed-commits",
        action="store_true",
        help="pair runs made on different code commits or on a dirty tree (refused by default); prints each run's "
        "commit",
    )
    p.add_argument(
        "--prefix-stats",
        action="store_true",
        help="also the prefix stage's numbers: mixed sibling groups, flips per replay and per token, by depth",
    )
    p.add_argument(
        "--step-stats",
        action="store_true",
        help="also per step: prompts trained on, root rollouts, replays, groups trained, paths, tokens generated",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="DIR",
        help="also write the learning curves (pass@1 against generated rollouts and tokens) as PNGs into DIR",
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
    try:
        runs = paired_columns(
            args.dir,
            labels,
            seeds,
            allow_partial=args.allow_partial,
            allow_mixed_commits=args.allow_mixed_commits,
            prefix_stats=args.prefix_stats,
            step_stats=args.step_stats,
        )
    except RunsRefused as exc:
        print(exc, file=sys.stderr)
        return 2
    columns, curves, logs = runs.columns, runs.curves, runs.logs
    names = list(columns[args.baseline])
    print("label seed " + " ".join(names))
    for label in labels:
        for i, seed in enumerate(seeds):
            print(f"{label} {seed} " + " ".join(_fmt(columns[label][n][i]) for n in names))
    print(f"paired against {args.baseline} (mean [95% t-interval] boot [95% bootstrap interval], n seeds):")
    for label in labels[1:]:
        for n in (
            "final",
            "final_matched",
            "auc_rollouts",
            "auc_tokens",
            "effective_ratio",
            *(PREFIX_KEYS if args.prefix_stats else ()),
            *((*STEP_KEYS, "active_prompts_total") if args.step_stats else ()),
        ):
            text, k = paired_text(columns, label, args.baseline, n)
            print(f"{label} - {args.baseline} {n}: {text}{_boot(columns, label, args.baseline, n)} n={k}")
    if args.prefix_stats:
        print("by anchor depth, pooled over seeds: replays flips flips_per_replay flips_per_1k_replay_tokens")
        for label in labels:  # the steps of all seeds as one log: prefix_stage_stats sums over steps
            every = [r for seed in seeds for r in logs[label, seed]]
            for d, st in prefix_stage_stats(every)["by_depth"].items():
                rate, per_k = _fmt(st["flip_rate"]), _fmt(st["flips_per_1k_tokens"])
                print(f"{label} depth {d}: {st['replays']:.0f} {st['flips']:.0f} {rate} {per_k}")
    if args.plot is not None:
        args.plot.mkdir(parents=True, exist_ok=True)
        for axis, name in (
            ("rollouts", "rollouts"),
            ("rollout_equivalents", "rollout_eq"),
            ("tokens", "tokens"),
        ):
            path = args.plot / f"accuracy_vs_{name}.png"
            title = f"Held-out pass@1 vs {AXIS_LABELS[axis].split(' (')[0]}, seeds {args.seeds}"
            if learning_curve_plot(path, title, curves, axis):
                print(f"wrote {path}")
    return 0


class RunsRefused(ValueError):
    """Runs that must not be paired, or a log that is missing or unreadable; the message is the one line main prints."""


class PairedRuns(NamedTuple):
    """What `paired_columns` read: per label the per-seed columns (``columns[label][name][i]`` is seed
    ``seeds[i]``), the learning curves, and the logs by (label, seed)."""

    columns: dict[str, dict[str, list[float]]]
    curves: dict[str, list]
    logs: dict[tuple[str, int], list[dict]]


def paired_columns(
    folder: Path,
    labels: list[str],
    seeds: list[int],
    *,
    allow_partial: bool = False,
    allow_mixed_commits: bool = False,
    prefix_stats: bool = False,
    step_stats: bool = False,
) -> PairedRuns:
    """The per-seed columns main prints, for ``labels`` (the baseline first) over ``seeds``, read from
    ``folder/<label>/seed_<s>/metrics.jsonl(.gz)`` and checked by `check_runs` (scripts/claims.py reads the same).

    Raises:
        RunsRefused: a log missing, unreadable or without an evaluation, or the runs refused by `check_runs`.
    """
    baseline = labels[0]
    logs: dict[tuple[str, int], list[dict]] = {}
    configs: dict[tuple[str, int], dict | None] = {}
    for label in labels:
        for seed in seeds:
            plain = folder / label / f"seed_{seed}" / "metrics.jsonl"
            packed = plain.with_name("metrics.jsonl.gz")  # logs kept in results/ are compressed
            path = plain if plain.exists() else packed
            if not path.exists():
                raise RunsRefused(f"no log: neither {plain} nor {path.name} there")
            try:
                logs[label, seed] = read_metrics(path)
            except (OSError, EOFError, UnicodeDecodeError) as exc:  # a corrupt .gz
                raise RunsRefused(f"unreadable log {path}: {exc}") from None
            if not any(r.get("kind") == "eval" for r in logs[label, seed]):
                raise RunsRefused(f"no held-out evaluation in {path}: nothing to summarise")
            try:
                configs[label, seed] = _config(path.with_name("config.json"))
            except ValueError as exc:
                raise RunsRefused(str(exc)) from None
    refusal = check_runs(
        logs,
        configs,
        allow_partial=allow_partial,
        baseline=baseline,
        allow_mixed_commits=allow_mixed_commits,
    )
    if refusal:
        raise RunsRefused(refusal)
    # curve_summaries indexes seeds by position: position i is seeds[i] for every label
    curves = {label: [learning_curve(logs[label, s]) for s in seeds] for label in labels}
    axes = ("rollouts", "tokens")
    per_axis = {axis: curve_summaries(curves, baseline, axis) for axis in axes}
    matched = matched_finals(curves, baseline)
    columns: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    for label in labels:
        cols = columns[label]
        cols["final"] = [row["final_accuracy"] for row in per_axis["rollouts"][label]]
        for axis in axes:
            auc, _, share = summary_keys(axis)
            cols[f"auc_{axis}"] = [row[auc] for row in per_axis[axis][label]]
            cols[f"reach_{axis}"] = [row[share] for row in per_axis[axis][label]]
            cols[f"reach_x_{axis}"] = [row[crossing_keys(axis)[1]] for row in per_axis[axis][label]]
        cols["final_matched"] = [row[MATCHED_KEYS[0]] for row in matched[label]]
        cols["probe"] = [c.probe_rollouts for c in curves[label]]
        cols["effective_ratio"] = [summarize(logs[label, s]).get("effective_ratio", math.nan) for s in seeds]
        costs = [run_cost(logs[label, s]) for s in seeds]
        for name, key in (("tokens", "tokens_generated_total"), ("rollouts", "rollouts_generated_total")):
            cols[name] = [cost.get(key, math.nan) for cost in costs]
        cols["steps"] = [cost.get("steps", math.nan) for cost in costs]
        if prefix_stats:
            stats = [prefix_stage_stats(logs[label, s]) for s in seeds]
            for key in PREFIX_KEYS:
                cols[key] = [float(st[key]) for st in stats]
        if step_stats:
            means = [step_means(train_records(logs[label, s]), STEP_KEYS, totals=True) for s in seeds]
            for key in (*STEP_KEYS, "active_prompts_total"):
                cols[key] = [m.get(key, math.nan) for m in means]
    return PairedRuns(columns, curves, logs)


def paired_text(
    columns: dict[str, dict[str, list[float]]], label: str, baseline: str, n: str
) -> tuple[str, int]:
    """``label - baseline`` on column ``n`` as printed: ``+0.020 [+0.007, +0.033]`` (the mean of the paired
    differences and its 95% Student-t interval; "(one seed)" instead of an interval for one pair), and the number
    of seeds where both are finite."""
    mean, half, k = paired_interval(columns[label][n], columns[baseline][n])
    interval = (
        f"[{mean - half:+.3f}, {mean + half:+.3f}]"
        if math.isfinite(half)
        else ("(one seed)" if k == 1 else "(no seed where both are finite)")
    )
    return f"{mean:+.3f} {interval}", k


def _config(path: Path) -> dict | None:
    """A run's config.json as a dict; None where there is none (a run kept before configs were; unknown).

    Raises:
        ValueError: the file is there but unreadable or not a JSON object (a damaged run is refused, not paired
            as one whose state is unknown).
    """
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"unreadable {path}: not a JSON object")
    return data


def check_runs(
    logs: dict[tuple[str, int], list[dict]],
    configs: dict[tuple[str, int], dict | None],
    *,
    allow_partial: bool,
    baseline: str | None = None,
    allow_mixed_commits: bool = False,
) -> str | None:
    """The one-line refusal for runs that must not be paired (unfinished ones unless ``allow_partial``, runs of
    one seed from different warm starts, a run paired with ``baseline``'s run of its seed that ran other code or
    on a dirty tree unless ``allow_mixed_commits``, shared keys that differ), or None; notes on stderr for what is
    unknown (runs without a config or without provenance), for the unfinished runs allowed in, and every run's
    commits when mixed commits are allowed."""
    name = {key: f"{key[0]}/seed_{key[1]}" for key in logs}
    commits = {k: run_commits(c) for k, c in configs.items() if c is not None and PROVENANCE_KEY in c}
    mixed = [
        (k, (baseline, k[1]))
        for k in commits
        if baseline is not None
        and k[0] != baseline
        and (baseline, k[1]) in commits
        and (
            commits[k] != commits[baseline, k[1]]
            or "dirty" in commits[k]
            or "dirty" in commits[baseline, k[1]]
        )
    ]
    if mixed and not allow_mixed_commits:
        run, base = mixed[0]
        return (
            f"{name[run]} ({_commits_text(commits[run])}) and {name[base]} ({_commits_text(commits[base])}) ran "
            f"different code or a dirty tree: a comparison pairs runs of one commit on a clean tree "
            f"({len(mixed)} such pairing(s)); rerun them on one commit, or pass --allow-mixed-commits"
        )
    if allow_mixed_commits and commits:
        for k in sorted(commits):
            print(f"note: {name[k]} ran on {_commits_text(commits[k])}", file=sys.stderr)
    unknown_config = [name[k] for k, c in configs.items() if c is None]
    if unknown_config:
        print(
            f"note: no config.json for {', '.join(unknown_config)}: finished state and shared keys unknown",
            file=sys.stderr,
        )
    status = {k: log_finished(logs[k], c) if c is not None else None for k, c in configs.items()}
    unfinished = [name[k] for k, done in status.items() if done is False]
    if unfinished and not allow_partial:
        return (
            f"unfinished runs: {', '.join(unfinished)} (their last evaluation is not a final); finish them, leave "
            "their seeds out, or pass --allow-partial"
        )
    if unfinished:
        print(f"note: unfinished runs included (--allow-partial): {', '.join(unfinished)}", file=sys.stderr)
    no_provenance = [name[k] for k, c in configs.items() if c is not None and PROVENANCE_KEY not in c]
    if no_provenance:
        print(
            f"note: provenance unknown (config.json from before commits and warm starts were recorded) for "
            f"{', '.join(no_provenance)}",
            file=sys.stderr,
        )
    for seed in sorted({s for _, s in configs}):
        starts = {
            name[k]: provenance_of(c)["warm_start_hash"]
            for k, c in configs.items()
            if k[1] == seed and c is not None and provenance_of(c)["warm_start_hash"] is not None
        }
        if len(set(starts.values())) > 1:
            return f"runs of seed {seed} started from different warm starts: " + ", ".join(
                f"{run} ({h[:19]})" for run, h in starts.items()
            )
    diffs = shared_differences({name[k]: c for k, c in configs.items() if c is not None})
    if diffs:
        return f"runs differ in what paired runs share: {diffs[0]}"
    return None


def run_commits(config: dict) -> tuple[str, ...]:
    """The code a run ran on, from its config.json's provenance: its commit, then every commit that resumed it
    (``resumed_code_commits``), each short hash once in order, and "dirty" when any of them had a dirty tree
    (unknown commits read "unknown")."""
    block = config.get(PROVENANCE_KEY)
    block = block if isinstance(block, dict) else {}
    parts = [{"code_commit": block.get("code_commit"), "code_dirty": block.get("code_dirty")}]
    parts += [r for r in block.get("resumed_code_commits") or [] if isinstance(r, dict)]
    out: list[str] = []
    for part in parts:
        commit = str(part.get("code_commit") or "unknown")[:7]
        if commit not in out:
            out.append(commit)
    if any(part.get("code_dirty") for part in parts):
        out.append("dirty")
    return tuple(out)


def _commits_text(commits: tuple[str, ...]) -> str:
    return "code " + "+".join(c for c in commits if c != "dirty") + (", dirty" if "dirty" in commits else "")


def _boot(columns: dict[str, dict[str, list[float]]], label: str, baseline: str, n: str) -> str:
    """`` boot [low, high]``: the bootstrap interval of the paired differences (empty with fewer than
    `BOOTSTRAP_MIN_PAIRS` pairs)."""
    diffs = [
        a - b
        for a, b in zip(columns[label][n], columns[baseline][n], strict=False)
        if math.isfinite(a) and math.isfinite(b)
    ]
    if len(diffs) < BOOTSTRAP_MIN_PAIRS:
        return ""
    ci = stratified_bootstrap_ci(diffs)
    return f" boot [{ci.low:+.3f}, {ci.high:+.3f}]"


# per-run numbers of the prefix stage that get a paired interval (prefix_stage_stats keys)
PREFIX_KEYS = ("mixed_sibling_share", "replay_flip_rate", "flips_per_1k_tokens")
STEP_KEYS = (
    "active_prompts",
    "root_rollouts",
    "replays",
    "rollouts_generated",
    "trained_groups",
    "update_paths",
    "tokens_generated",
)


def _fmt(x: float) -> str:
    """Counts and large numbers without decimals, rates with three."""
    return f"{x:.0f}" if math.isfinite(x) and (x == int(x) or abs(x) >= 100) else f"{x:.3f}"


if __name__ == "__main__":
    sys.exit(main())
