"""Prompt overlap between the held-out tasks, the RL pool and the warm start of every preset (issue 22).

Prints one markdown table per preset, counting distinct normalised prompt texts
(`trace_rl.train.hygiene.shared_prompts`), for seeds 0..K-1:

- before: the task lists as the trainer loaded them up to issue 22, with the project's own ``load_tasks``: RL pool
  = train split at the run's seed, held-out = test split at the run's seed, warm start = the RL pool's tasks
  (or the train split at the run's seed with ``policy.sft_task_kwargs``); ``compare`` warm-starts once at seed 0,
  so the last column pairs seed 0's warm start with seed k's RL pool.
- after: `trace_rl.train.hygiene.run_tasks`, which the trainer uses now (the lists do not depend on the seed).

Usage::

    python benchmarks/archive/data_overlap.py [--seeds 4] [--presets demo,multistep] [--set env.train_limit=200 ...]
        [--before-set multihop_qa:env.train_limit=null ...]

``--set`` overrides apply to every preset (e.g. a smaller ``env.train_limit`` for a quick look); ``--before-set``
restores, for the before rows of one preset, a preset value that issue 22 changed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trace_rl.envs import load_tasks
from trace_rl.train.config import TrainConfig, load_config, preset_names
from trace_rl.train.hygiene import run_tasks, shared_prompts
from trace_rl.types import Task


def before(cfg: TrainConfig, seed: int) -> tuple[list[Task], list[Task], list[Task]]:
    """(held-out, RL pool, warm start) as run.py loaded them before issue 22 (all at the run's seed)."""
    env, pol = cfg.env, cfg.policy
    train = load_tasks(env.name, "train", env.train_limit, seed, **env.task_kwargs)
    held = load_tasks(env.name, "test", env.eval_tasks, seed, **env.task_kwargs) if env.eval_tasks else []
    sft: list[Task] = []
    if pol.sft_steps > 0:
        sft = (
            train
            if pol.sft_task_kwargs is None
            else load_tasks(env.name, "train", env.train_limit, seed, **pol.sft_task_kwargs)
        )
    return held, train, sft


def distinct(tasks: Sequence[Task]) -> int:
    return shared_prompts(tasks, tasks)


def table(name: str, cfg: TrainConfig, seeds: int, old: TrainConfig | None = None) -> list[str]:
    """The markdown rows of one preset; ``old`` is the config of the before rows (default ``cfg``)."""
    old = cfg if old is None else old
    rows = [
        f"**{name}** (env {cfg.env.name}, train_limit {cfg.env.train_limit}, eval_tasks {cfg.env.eval_tasks}, "
        f"warm start {'yes' if cfg.policy.sft_steps else 'no'})",
        "",
        "| seed | loader | held-out | RL pool | SFT | held-out in RL pool | held-out in SFT | RL pool in SFT "
        "| held-out shared with seed 0 | seed-0 SFT in this RL pool |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    held0, _, sft0 = before(old, 0)
    for seed in range(seeds):
        held, rl, sft = before(old, seed)
        rows.append(_row(seed, "before", held, rl, sft, held0, sft0))
    after: dict[int, Any] = {}
    for seed in range(seeds):
        after[seed] = run_tasks(replace(cfg, seed=seed))
    a0 = after[0]
    for seed in range(seeds):
        a = after[seed]
        rows.append(
            _row(
                seed, "after", list(a.held_out), list(a.rl_pool), list(a.sft), list(a0.held_out), list(a0.sft)
            )
        )
    a = after[0]
    rows.append("")
    rows.append(
        f"after: {a.rl_dropped} training tasks dropped as held-out, {a.sft_dropped} warm-start candidates dropped "
        "as held-out or RL-pool prompts."
    )
    return rows


def _row(
    seed: int,
    kind: str,
    held: Sequence[Task],
    rl: Sequence[Task],
    sft: Sequence[Task],
    held0: Sequence[Task],
    sft0: Sequence[Task],
) -> str:
    cells = [
        str(seed),
        kind,
        str(distinct(held)),
        str(distinct(rl)),
        str(distinct(sft)) if sft else "-",
        str(shared_prompts(held, rl)),
        str(shared_prompts(held, sft)) if sft else "-",
        str(shared_prompts(rl, sft)) if sft else "-",
        str(shared_prompts(held, held0)),
        str(shared_prompts(sft0, rl)) if sft0 else "-",
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--presets", default=",".join(preset_names()))
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument(
        "--before-set",
        action="append",
        default=[],
        metavar="PRESET:KEY=VALUE",
        help="an override for one preset's before rows only (a preset value this change edited)",
    )
    args = parser.parse_args(argv)
    for name in args.presets.split(","):
        t0 = time.perf_counter()
        cfg = load_config(preset=name, overrides=args.overrides)
        old_overrides = [o.split(":", 1)[1] for o in args.before_set if o.split(":", 1)[0] == name]
        old = load_config(preset=name, overrides=[*args.overrides, *old_overrides])
        print("\n".join(table(name, cfg, args.seeds, old)))
        print(f"\n({time.perf_counter() - t0:.0f} s)\n")


if __name__ == "__main__":
    main()
