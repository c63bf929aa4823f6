"""A trainer step's wall-clock and its parts, this code against a reference commit, on one warm start (issue 38 item 4).

Runs ``trace-rl train`` for ``--steps`` RL steps of ``--preset`` with each code from the same warm-started policy
folder (``--policy``, passed as ``policy.name`` with ``policy.sft_steps=0``), no evaluation (``eval_every=0``), the
same seed and ``--threads`` torch threads: the current working tree, and ``--reference`` (a git revision, checked
out into a temporary worktree and run with its own ``src`` first on PYTHONPATH; default: 1d161c0, the branch point
before issue 38's tree-packed update and fast decode loop). The two codes alternate ``--repeats`` times (one
process each, back to back; the reference goes first on even repeats), so both meet the same machine load.

From each run's ``metrics.jsonl`` it takes the step records after the first (step 1 also pays for imports, warm-up
and the predictor's first fit) and prints one JSON line: per code the medians over steps and repeats of
``wall_s`` and its parts (``time_generation_s``, ``time_tools_s``, ``time_predictor_s``, ``time_allocation_s``,
``time_update_s``), the mean ``effective_ratio``, and ``ratios`` current / reference of every median;
``reference_rev`` names the reference commit. The effective ratio moves with sampling only (both codes draw the
same tokens up to rounding; the fast decode loop's log-probabilities agree within 1e-4 of the reference engine's).

    python benchmarks/archive/step_breakdown.py --preset multistep --policy results/c23/warm_start/sft/policy --steps 4
    python benchmarks/archive/step_breakdown.py --preset demo --policy runs/c39/warm_start/sft/policy --steps 10
    python benchmarks/archive/step_breakdown.py --preset multistep --policy results/c23/warm_start/sft/policy \
        --set-current optim.compile=true

Seconds are wall-clock: run on a quiet machine (the JSON records the load average before and after).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PARTS = (
    "wall_s",
    "time_generation_s",
    "time_tools_s",
    "time_predictor_s",
    "time_allocation_s",
    "time_update_s",
)
REPO = Path(__file__).resolve().parents[2]


def train_command(src: Path, preset: str, out: Path, sets: list[str]) -> tuple[list[str], dict[str, str]]:
    """(command, environment) of ``trace-rl train --preset PRESET --out OUT --set ...`` run with the code under
    ``src`` first on PYTHONPATH."""
    cmd = [sys.executable, "-m", "trace_rl.cli.main", "train", "--preset", preset, "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    return cmd, {**os.environ, "PYTHONPATH": str(src)}


@contextlib.contextmanager
def codes_checked_out(reference: str, prefix: str) -> Iterator[tuple[Path, dict[str, Path]]]:
    """A temporary folder and the ``src`` folders of the two codes: "current" (this working tree) and "reference"
    (the git revision ``reference``, checked out as a worktree inside the folder); both removed on exit.

    Raises:
        subprocess.CalledProcessError: the revision could not be checked out.
    """
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    worktree = tmp / "reference"
    try:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), reference],
            check=True,
            capture_output=True,
        )
        yield tmp, {"current": REPO / "src", "reference": worktree / "src"}
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def add_set_options(ap: argparse.ArgumentParser) -> None:
    """``--set`` (config overrides for both codes) and ``--set-current`` (for this code only: settings the
    reference does not have, such as ``optim.compile=true``)."""
    ap.add_argument("--set", action="append", default=[], help="extra config overrides, for both codes")
    ap.add_argument(
        "--set-current",
        action="append",
        default=[],
        help="overrides for this code only (settings the reference does not have, e.g. optim.compile=true)",
    )


def train_once(src: Path, out: Path, args: argparse.Namespace, own: list[str]) -> list[dict[str, Any]]:
    """One ``train`` run of the code under ``src`` (``own``: overrides for this code only); its step records
    (training records only, step 1 included: `summary` leaves it out of the medians)."""
    sets = [
        f"steps={args.steps}",
        "eval_every=0",
        f"threads={args.threads}",
        f"seed={args.seed}",
        f"policy.name={Path(args.policy).resolve()}",
        "policy.sft_steps=0",
        *args.set,
        *own,
    ]
    cmd, env = train_command(src, args.preset, out, sets)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"train failed ({src}):\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "wall_s" in r]


def summary(records: list[dict[str, Any]]) -> dict[str, float]:
    """Medians of `PARTS` over the steps after the first, the mean effective ratio, and ``first_step_wall_s``
    (median over runs of step 1's wall: imports, warm-up, the predictor's first fit, a compile)."""
    later = [r for r in records if r.get("step", 0) >= 2]
    out = {k: statistics.median(float(r.get(k, 0.0)) for r in later) for k in PARTS}
    out["effective_ratio"] = statistics.fmean(float(r["effective_ratio"]) for r in later)
    out["steps_measured"] = len(later)
    out["first_step_wall_s"] = statistics.median(float(r["wall_s"]) for r in records if r.get("step") == 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="multistep")
    ap.add_argument(
        "--policy", required=True, help="warm-started policy folder (a run's or comparison's sft/policy)"
    )
    ap.add_argument("--steps", type=int, default=4, help="RL steps per run (step 1 is not measured)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--reference", default="1d161c0", help="git revision of the code to compare against")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    add_set_options(ap)
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be >= 2 (step 1 is not measured)")
    if not (Path(args.policy) / "config.json").is_file():
        ap.error(f"--policy {args.policy} is not a policy folder (no config.json)")
    load_before = os.getloadavg()
    records: dict[str, list[dict[str, Any]]] = {"current": [], "reference": []}
    own = {"current": args.set_current, "reference": []}
    with codes_checked_out(args.reference, "step-breakdown-") as (tmp, codes):
        for r in range(args.repeats):
            order = ["reference", "current"] if r % 2 == 0 else ["current", "reference"]
            for name in order:
                records[name] += train_once(codes[name], tmp / f"{name}_{r}", args, own[name])
    result: dict[str, Any] = {name: summary(recs) for name, recs in records.items()}
    result["ratios"] = {
        k: (result["current"][k] / result["reference"][k] if result["reference"][k] > 0 else None)
        for k in PARTS
    }
    result.update(
        preset=args.preset,
        reference_rev=args.reference,
        sets=args.set,
        sets_current=args.set_current,
        steps=args.steps,
        repeats=args.repeats,
        threads=args.threads,
        loadavg_before=load_before[0],
        loadavg_after=os.getloadavg()[0],
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
