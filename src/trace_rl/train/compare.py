"""Equal-budget comparison of methods over seeds: one run per (method, seed), then comparison.json.

All runs of a comparison start from the same policy: when the preset has a warm start, it is run once (seed 0)
into DIR/warm_start/ and every (method, seed) run starts from that checkpoint, so differences come from where
the samples go, not from different initial policies. The warm start is built in a temporary folder and moved into
place complete (`warm_start_once`); a reused one must carry the config it was made with (`check_warm_start`).

What the runs of a comparison share is guarded at both ends (`trace_rl.train.compare_shared`, whose names stay
importable from here): a variant cannot change it (`parse_variant`), and after the runs their config.json
provenance must show one warm start per seed and equal `SHARED_KEYS` (`check_provenance`). A method that reads the warm start's probe pays for it out of its ``total_budget``
(`trace_rl.train.warm_start`, docs/training.md "The probe's charge").
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trace_rl.errors import UserError
from trace_rl.metrics.curves import (
    MATCHED_KEYS,
    SUMMARY_AXES,
    crossing_keys,
    curves_document,
    learning_curve,
    run_cost,
    summary_keys,
)
from trace_rl.metrics.intervals import mean_ci, stratified_bootstrap_ci
from trace_rl.metrics.numbers import is_finite_number
from trace_rl.train.checkpoint import completed_step, finished_run
from trace_rl.train.compare_shared import DATA_KEYS as DATA_KEYS
from trace_rl.train.compare_shared import EVAL_KEYS as EVAL_KEYS
from trace_rl.train.compare_shared import SECTIONS as SECTIONS
from trace_rl.train.compare_shared import SHARED_KEYS as SHARED_KEYS
from trace_rl.train.compare_shared import (
    Run,
    check_provenance,
    check_same_start,
    parse_variant,
    warm_start_once,
)
from trace_rl.train.compare_shared import check_warm_start as check_warm_start
from trace_rl.train.compare_shared import shared_differences as shared_differences
from trace_rl.train.config import ConfigError, TrainConfig, budget_shape, validate, with_overrides
from trace_rl.train.provenance import (
    code_version,
)
from trace_rl.train.run import train
from trace_rl.train.rundir import check_same_config, read_metrics, summarize

# learning curves (trace_rl.metrics.curves): None in a run where not defined (the baseline's accuracy not reached)
CURVE_METRICS = (
    "final_accuracy",
    *(key for axis in SUMMARY_AXES for key in summary_keys(axis)),
    *(key for axis in SUMMARY_AXES for key in crossing_keys(axis)),
    MATCHED_KEYS[0],
)

METRICS = (
    "effective_ratio",
    "success_rate",
    "eval_accuracy",
    "budget_spent",
    "skip_rate",
    "active_prompts",
    "replays",
    "wall_s",
    *CURVE_METRICS,
    # cost as generated, per step and in total (trace_rl.metrics.curves.run_cost)
    "steps",
    "rollouts_generated",
    "rollouts_generated_total",
    "budget_spent_total",
    "tokens_generated",
    "tokens_generated_total",
    "tool_calls",
    "tool_calls_total",
    # the warm start's probe charged before step 1 (0 for a method that does not read it)
    "probe_rollouts_generated",
    "probe_budget_spent",
    "probe_tokens_generated",
    # 1.0 where a run's final could be read at the baseline's spend (trace_rl.metrics.curves.matched_finals)
    MATCHED_KEYS[1],
)


BOOTSTRAP_MIN_PAIRS = 3
"""Fewest paired seeds a bootstrap interval is given for (two values resample to three means: no interval)."""

PAIRED_METRICS = ("effective_ratio", "success_rate", "eval_accuracy", *CURVE_METRICS)


def paired_differences(
    per_method: dict[str, dict[str, Any]], methods: Sequence[str], seeds: int, *, baseline: str
) -> dict[str, dict[str, dict[str, float]]]:
    """Per method and metric: mean of (method - baseline) over seeds with its 95% Student-t interval
    (``ci_low``, ``ci_high``) and, with at least `BOOTSTRAP_MIN_PAIRS` pairs, a 95% bootstrap interval over the
    paired seeds (``boot_low``, ``boot_high``: `trace_rl.metrics.intervals.stratified_bootstrap_ci`, one stratum:
    one environment per comparison).

    Runs with the same seed are paired: they start from the same policy and draw the same candidate pools in
    the same order (the data cursor is seeded by the run's seed). Metrics are each run's mean over its steps
    (``eval_accuracy``: its last evaluation; the learning-curve numbers: `trace_rl.metrics.curves`). Seeds where
    either value is missing or None (not defined, e.g. the baseline's final accuracy not reached) are left out;
    ``n`` says how many pairs remain. With one pair the interval collapses to the difference.
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    base_runs = per_method[baseline]["runs"]
    for method in methods:
        if method == baseline:
            continue
        rows: dict[str, dict[str, float]] = {}
        for metric in PAIRED_METRICS:
            diffs = [
                per_method[method]["runs"][s][metric] - base_runs[s][metric]
                for s in range(seeds)
                if is_finite_number(per_method[method]["runs"][s].get(metric))
                and is_finite_number(base_runs[s].get(metric))
            ]
            if diffs:
                rows[metric] = mean_ci(diffs).as_dict()
            if len(diffs) >= BOOTSTRAP_MIN_PAIRS:
                boot = stratified_bootstrap_ci(diffs)
                rows[metric].update(boot_low=boot.low, boot_high=boot.high)
        out[f"{method}-{baseline}"] = rows
    return out


def _die_with_parent(parent: int) -> None:
    """ProcessPool initializer: a worker gets SIGTERM when the compare process dies, even by SIGKILL (Linux
    ``prctl(PR_SET_PDEATHSIG)``), so no orphaned run keeps writing into the run folders after its parent is gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _sigterm_to_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_one(run_cfg: TrainConfig, run_dir: Path, progress: bool) -> dict[str, float]:
    """Train one (method, seed) run (continuing it if an earlier compare was interrupted); its summary."""
    started = (run_dir / "checkpoints").exists() or (run_dir / "metrics.jsonl").exists()
    if started:
        check_same_config(run_cfg, run_dir)  # continuing is only right for the same run
        check_same_start(run_cfg, run_dir)
    done = completed_step(run_dir) if started else None
    # a finished run (all steps, or its total budget spent) is read back, not set up again
    if done is None or (done < run_cfg.steps and not finished_run(run_dir)):
        train(run_cfg, run_dir, resume=started, progress=progress)
    return summarize(read_metrics(run_dir / "metrics.jsonl"))


def check_seeds(seeds: Iterable[int]) -> list[int]:
    """The seeds of a plan as a list, checked: at least one, distinct, each >= 0 (a seed listed twice would run
    into one folder twice, or pair a run with itself).

    Raises:
        ValueError: no seed, a seed listed twice, or a negative seed.
    """
    out = list(seeds)
    if not out or len(set(out)) != len(out) or min(out) < 0:
        raise UserError(f"seeds must be distinct and >= 0 (at least one), got {out}")
    return out


def parse_seeds(text: str) -> list[int]:
    """Comma-separated seeds (``"4"``, ``"0,1,2"``) as `check_seeds` accepts them.

    Raises:
        ValueError: a part that is not an integer, or what `check_seeds` refuses.
    """
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"expected comma-separated seeds such as 4 or 0,1, got {text!r}") from None
    return check_seeds(seeds)


def plan_runs(
    cfg: TrainConfig,
    variants: Sequence[tuple[str, str, tuple[str, ...]]],
    seeds: Iterable[int],
    root: Path,
    *,
    jobs: int = 1,
    log: Callable[[str], None] = print,
) -> tuple[TrainConfig, list[Run]]:
    """The warm start (run once into root/warm_start/, `warm_start_once`) and every (variant, seed) run's config,
    seed-major so that an interrupted comparison has every method at its first seeds. Returns (the config every
    run starts from, the runs). With ``jobs`` > 1 each run gets one torch thread unless the config sets
    ``threads``; ``total_budget`` 0 becomes ``steps`` x the per-step budget (equal generated budget: `dapo`'s steps
    cost more, so it takes fewer).

    ``variants`` are `parse_variant` results; ``seeds`` need not start at 0 (`scripts/compare_seeds.py` adds
    seeds to a comparison run earlier).

    Raises:
        ValueError: jobs < 1, a seed listed twice or a negative seed, or ``root`` is a file.
        ConfigError: a label named twice, an invalid run config, or variants whose total budgets differ (the
            comparison is at equal budget), all before the (long) warm start.
    """
    seeds = check_seeds(seeds)
    if jobs < 1:
        raise UserError(f"jobs must be >= 1, got {jobs}")
    labels = [label for label, _, _ in variants]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"--methods names a label twice: {', '.join(labels)}")
    budgets: dict[str, float] = {}
    for label, method, overrides in variants:
        variant = with_overrides(replace(cfg, method=method), overrides)
        validate(variant)
        budgets[label] = variant.total_budget or variant.steps * budget_shape(variant).total
    if len(set(budgets.values())) > 1:
        raise ConfigError(
            "the variants' total budgets differ ("
            + ", ".join(f"{label} {b:g}" for label, b in budgets.items())
            + " rollout-equivalents: steps x the per-step budget); give every variant the per-step budget of "
            "the others (e.g. budget.roots=32;budget.continuations=6 against 64 x 2)"
        )
    if root.exists() and not root.is_dir():
        raise UserError(f"{root} is a file, not a comparison folder")
    root.mkdir(parents=True, exist_ok=True)
    base = warm_start_once(cfg, root, log)
    if jobs > 1 and base.threads == 0:
        base = replace(base, threads=1)
    plan: list[Run] = []
    for seed in seeds:
        for label, method, overrides in variants:
            run_cfg = with_overrides(replace(base, method=method, seed=seed), overrides)
            if run_cfg.total_budget == 0:
                run_cfg = replace(run_cfg, total_budget=run_cfg.steps * budget_shape(run_cfg).total)
            validate(run_cfg)
            plan.append((label, seed, run_cfg, root / label / f"seed_{seed}"))
    return base, plan


def train_runs(
    plan: Sequence[Run], *, jobs: int = 1, progress: bool = False, log: Callable[[str], None] = print
) -> dict[tuple[str, int], dict[str, Any]]:
    """Train (or read back, or resume) every run of ``plan``, ``jobs`` at a time in separate processes; each
    run's `summarize` by (label, seed). A failed run raises at once; on a failure or an interrupt (SIGTERM
    included) the queued runs are dropped and the running ones stopped, and a rerun resumes them.
    """
    if jobs < 1:
        raise UserError(f"jobs must be >= 1, got {jobs}")
    summaries: dict[tuple[str, int], dict[str, Any]] = {}
    if jobs == 1:
        for method, seed, run_cfg, run_dir in plan:
            log(f"== {method} seed {seed} -> {run_dir}")
            summaries[(method, seed)] = _run_one(run_cfg, run_dir, progress)
        return summaries
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    log(f"== {len(plan)} runs, {jobs} at a time")
    pool = ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=mp.get_context("spawn"),
        initializer=_die_with_parent,
        initargs=(os.getpid(),),
    )
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _sigterm_to_exit) if main else None  # `kill` unwinds like ^C
    finished = False
    try:
        futures = {pool.submit(_run_one, c, d, False): (m, s) for m, s, c, d in plan}
        for future in as_completed(futures):
            method, seed = futures[future]
            summaries[(method, seed)] = future.result()  # a failed run raises here, at once
            log(f"== {method} seed {seed} done")
        finished = True
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        # on a failure or interrupt: drop the queued runs and stop the running ones (a rerun resumes them)
        pool.shutdown(wait=finished, cancel_futures=True)
        if not finished:
            for worker in mp.active_children():
                worker.terminate()
            for worker in mp.active_children():
                worker.join(timeout=30)
    return summaries


def compare(
    cfg: TrainConfig,
    methods: Sequence[str],
    seeds: int,
    out: str | Path,
    *,
    progress: bool = False,
    jobs: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train every method with seeds 0..seeds-1 at the config's budget; write and return comparison.json.

    Every run gets the same generated budget: ``total_budget`` (rollout-equivalents over the run) defaults to
    ``steps`` x the per-step budget, so the methods that spend their step budget exactly run ``steps`` steps
    and `dapo`, whose steps draw until its batch is full, runs as many as the budget pays for.

    ``methods`` entries are method names or variants (`parse_variant`: a label, a method and config overrides,
    which the variant's runs apply on top of ``cfg``; its row in comparison.json records them with its own
    ``budget_total``). The first entry is the baseline of ``paired``.

    ``jobs`` > 1 runs that many (method, seed) runs at once in separate processes, each with one torch thread
    unless the config sets ``threads``. Every run is seeded on its own; with the same ``threads`` the runs of
    ``jobs=1`` and ``jobs>1`` differ at most by the floating-point effects of batch composition in the engine
    (tool calls finish in a timing-dependent order).

    Raises:
        ValueError: jobs < 1, an invalid run config or variant (ConfigError), a warm start in ``out`` that is
            incomplete or was made with another config, or runs whose shared parts differ (`check_provenance`).
    """
    variants = [parse_variant(m) for m in methods]
    labels = [label for label, _, _ in variants]
    root = Path(out)
    base, plan = plan_runs(cfg, variants, range(seeds), root, jobs=jobs, log=log)
    summaries = train_runs(plan, jobs=jobs, progress=progress, log=log)
    # learning curves and cost as generated, read back from every run's log (finished runs included)
    logs = {(label, seed): read_metrics(run_dir / "metrics.jsonl") for label, seed, _, run_dir in plan}
    curves = {label: [learning_curve(logs[label, seed]) for seed in range(seeds)] for label in labels}
    document = curves_document(curves, labels[0])
    for (label, seed), records in logs.items():
        summaries[(label, seed)].update(run_cost(records))
        summaries[(label, seed)].update(document["methods"][label]["summary"][seed])
    provenance = check_provenance(plan, base)
    (root / "curves.json").write_text(json.dumps(document, indent=2))
    per_method: dict[str, dict[str, Any]] = {}
    for label, method, overrides in variants:
        runs = [summaries[(label, seed)] for seed in range(seeds)]
        row: dict[str, Any] = {"seeds": seeds, "method": method}
        run_cfg = with_overrides(replace(base, method=method), overrides)
        if overrides:
            row["overrides"] = list(overrides)
            row["budget_total"] = budget_shape(run_cfg).total
        # the run's total_budget (rollout-equivalents, equal for every label); its RL budget is that minus the
        # warm start's probe where the method reads it (probe_budget_spent, 0 otherwise)
        total = next(c.total_budget for lab, _, c, _ in plan if lab == label)
        row["run_budget_total"] = total
        row["rl_budget_total"] = total - float(np.mean([r.get("probe_budget_spent", 0.0) for r in runs]))
        for metric in METRICS:
            vals = [r[metric] for r in runs if is_finite_number(r.get(metric))]
            if metric.endswith("_to_baseline_final"):
                row[f"{metric}_reached"] = len(vals)  # seeds; the mean is over these
            if vals:
                row[metric] = float(np.mean(vals))
                row[f"{metric}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        row["runs"] = runs
        per_method[label] = row
    result = {
        "preset": cfg.preset,
        "budget_total": budget_shape(cfg).total,
        "methods": per_method,
        "paired": paired_differences(per_method, labels, seeds, baseline=labels[0]),
        "curves": {
            "file": "curves.json",
            "baseline": labels[0],
            "auc_range": document["auc_range"],
            "auc_ranges": document["auc_ranges"],
        },
        "config": base.to_dict(),
        "provenance": {"code_commit": code_version()[0], "code_dirty": code_version()[1], **provenance},
    }
    (root / "comparison.json").write_text(json.dumps(result, indent=2))
    return result
