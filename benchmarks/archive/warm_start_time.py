"""A preset's warm start wall-clock, this code against a reference commit, at the preset's own stop rule (issue 38).

Runs ``trace-rl train --preset P --steps 1`` (no evaluation) with each code from the same config and seed, and
reads the warm start's record (``sft/sft.json``: ``seconds``, ``steps``, whether the stop rule ``stopped`` it,
and, where the code records it, ``eval_seconds``, the probes' share). The reference code (a git revision, default
1d161c0, the branch point of issue 38) is checked out into a temporary worktree and run with its own ``src``
first on PYTHONPATH (`benchmarks/archive/step_breakdown.py`'s `codes_checked_out` and `train_command`).

``--concurrent`` runs the two codes at the same time, one process each (with ``--threads 1`` on a 2-core
machine: one core each, both meeting the same load for the whole run; a full `multistep` warm start takes tens
of minutes, so back-to-back runs would meet different loads); otherwise they run one after the other,
``--repeats`` times, alternating which goes first. Prints one JSON line: per code the medians over repeats of
``seconds`` (and ``eval_seconds`` where recorded), the ``steps`` each run took, and ``ratio`` = current /
reference seconds.

    python benchmarks/archive/warm_start_time.py --preset multistep --concurrent
    python benchmarks/archive/warm_start_time.py --preset multistep --set policy.sft_steps=300 --set policy.sft_min_steps=300
    python benchmarks/archive/warm_start_time.py --preset multistep --concurrent \
        --set-current policy.sft_dtype=bfloat16 --set-current policy.sft_compile=true

Seconds are wall-clock: run on a quiet machine (the JSON records the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

from step_breakdown import (  # benchmarks/archive/ is the script's folder
    add_set_options,
    codes_checked_out,
    train_command,
)


def start(src: Path, out: Path, args: argparse.Namespace, own: list[str]) -> subprocess.Popen[str]:
    """Start one ``train`` run of the code under ``src`` (its warm start and one RL step); ``own``: overrides
    for this code only."""
    sets = ["steps=1", "eval_every=0", f"threads={args.threads}", f"seed={args.seed}", *args.set, *own]
    cmd, env = train_command(src, args.preset, out, sets)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    """Wait for a run; its warm start's record."""
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"train failed ({out}):\n{err[-3000:]}")
    record: dict[str, Any] = json.loads((out / "sft" / "sft.json").read_text())
    return {k: record[k] for k in ("seconds", "steps", "stopped", "eval_seconds") if k in record}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="multistep")
    ap.add_argument("--reference", default="1d161c0", help="git revision of the code to compare against")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--concurrent", action="store_true", help="run the two codes at the same time")
    add_set_options(ap)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"current": [], "reference": []}
    own = {"current": args.set_current, "reference": []}
    with codes_checked_out(args.reference, "warm-start-time-") as (tmp, codes):
        for r in range(args.repeats):
            order = ["reference", "current"] if r % 2 == 0 else ["current", "reference"]
            if args.concurrent:
                procs = {name: start(codes[name], tmp / f"{name}_{r}", args, own[name]) for name in order}
                for name, proc in procs.items():
                    runs[name].append(finish(proc, tmp / f"{name}_{r}"))
            else:
                for name in order:
                    runs[name].append(
                        finish(start(codes[name], tmp / f"{name}_{r}", args, own[name]), tmp / f"{name}_{r}")
                    )
    result: dict[str, Any] = {}
    for name, recs in runs.items():
        result[name] = {
            "seconds": statistics.median(r["seconds"] for r in recs),
            "steps": [r["steps"] for r in recs],
            "stopped": [r["stopped"] for r in recs],
        }
        if all("eval_seconds" in r for r in recs):
            result[name]["eval_seconds"] = statistics.median(r["eval_seconds"] for r in recs)
    result["ratio"] = result["current"]["seconds"] / result["reference"]["seconds"]
    result.update(
        preset=args.preset,
        reference_rev=args.reference,
        sets=args.set,
        sets_current=args.set_current,
        threads=args.threads,
        repeats=args.repeats,
        concurrent=args.concurrent,
        loadavg_before=load_before[0],
        loadavg_after=os.getloadavg()[0],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
