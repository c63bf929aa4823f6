"""Keep the logs of a comparison's finished runs in the repository (results/, see results/README.md).

A comparison folder (``trace-rl compare`` or ``scripts/compare_seeds.py`` output) holds checkpoints and warm starts
too large to commit; the logs and configs are enough to recompute every table (``scripts/paired_runs.py``). This
copies, for every run folder ``RUNS/<label>/seed_<s>/`` whose newest checkpoint marks it finished
(`trace_rl.train.checkpoint.finished_run`), its metrics.jsonl gzip-compressed (byte-stable: no timestamp in the
header) and its config.json to ``DEST/<label>/seed_<s>/``. Unfinished runs are listed and skipped; a log already
kept is overwritten only when the run's log differs.

    python scripts/keep_logs.py runs/c23 results/c23
    python scripts/keep_logs.py runs/c23 results/c23 --warm-start   # also the warm start's policy (one folder)

``--warm-start`` also copies ``RUNS/warm_start/sft`` (the SFT policy every run of the comparison started from, and
its sft.json) to ``DEST/warm_start/sft``, so that a later session on a wiped machine can add seeds from the same
starting policy: copy it back to ``<out>/warm_start/sft`` before `compare_seeds.py`, which then reuses it instead of
training a new one. Exit status 2 when RUNS holds no run folder.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

from trace_rl.train.checkpoint import finished_run


def keep(runs: Path, dest: Path, warm_start: bool = False) -> tuple[list[Path], list[Path]]:
    """Copy the finished runs' logs; returns (kept run folders, unfinished run folders)."""
    kept, unfinished = [], []
    for run in sorted(runs.glob("*/seed_*")):
        if not (run / "metrics.jsonl").is_file():
            continue
        if not finished_run(run):
            unfinished.append(run)
            continue
        target = dest / run.relative_to(runs)
        target.mkdir(parents=True, exist_ok=True)
        packed = gzip.compress((run / "metrics.jsonl").read_bytes(), mtime=0)
        out = target / "metrics.jsonl.gz"
        if not out.exists() or out.read_bytes() != packed:
            out.write_bytes(packed)
        shutil.copyfile(run / "config.json", target / "config.json")
        kept.append(run)
    if warm_start:
        sft = runs / "warm_start" / "sft"
        if not (sft / "policy").is_dir():
            raise FileNotFoundError(f"no warm start policy at {sft / 'policy'}")
        shutil.copytree(sft, dest / "warm_start" / "sft", dirs_exist_ok=True)
    return kept, unfinished


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, help="comparison folder holding <label>/seed_<s>/")
    p.add_argument("dest", type=Path, help="where the logs go, e.g. results/c23")
    p.add_argument("--warm-start", action="store_true", help="also copy RUNS/warm_start/sft")
    args = p.parse_args(argv)
    if not any(args.runs.glob("*/seed_*/metrics.jsonl")):
        print(f"no run folder (<label>/seed_<s>/metrics.jsonl) under {args.runs}", file=sys.stderr)
        return 2
    try:
        kept, unfinished = keep(args.runs, args.dest, warm_start=args.warm_start)
    except FileNotFoundError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for run in kept:
        print(f"kept {run}")
    for run in unfinished:
        print(f"not finished, skipped: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
