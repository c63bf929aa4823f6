"""How many of a training run's tool calls a started spare sandbox served (issue 38 item 3).

Runs ``trace-rl train`` in this process for ``--steps`` steps of ``--preset`` (no evaluation, the warm-started
``--policy``), counting every sandbox start: by the spare thread (`trace_rl.envs.sandbox_spares`, a start ahead of
its call) or on demand (in the calling thread: no spare was ready). Prints one JSON line: ``calls``,
``started_ahead``, ``on_demand`` and ``served_by_spares`` = 1 - on_demand / calls (spares started but never used
at the end, at most ``spares`` per key, are in ``started_ahead`` only). Counts, not seconds: load changes how
fast the thread refills, so run it on the machine and load the step timings come from.

    python benchmarks/archive/spare_hits.py --preset multistep --policy results/c23/warm_start/sft/policy --steps 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from typing import Any

from trace_rl.cli.main import main as cli
from trace_rl.envs import sandbox


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="multistep")
    ap.add_argument("--policy", required=True, help="a warm-started policy folder (policy.name)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    counts = {"calls": 0, "started_ahead": 0, "on_demand": 0}
    start, run_with = sandbox._start, sandbox._run_with

    def counted_start(*a: Any) -> sandbox._Started:
        ahead = threading.current_thread().name == "trace-rl-sandbox-spares"
        counts["started_ahead" if ahead else "on_demand"] += 1
        return start(*a)

    def counted_run(*a: Any, **k: Any) -> sandbox.ExecResult:
        counts["calls"] += 1
        return run_with(*a, **k)

    sandbox._start, sandbox._run_with = counted_start, counted_run  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as out:
        sets = [f"policy.name={args.policy}", "policy.sft_steps=0", "eval_every=0", f"threads={args.threads}"]
        rc = cli(
            ["train", "--preset", args.preset, "--steps", str(args.steps), "--out", out]
            + [x for s in sets for x in ("--set", s)]
        )
    if rc:
        raise SystemExit(rc)
    served = 1 - counts["on_demand"] / counts["calls"] if counts["calls"] else float("nan")
    print(json.dumps({**counts, "served_by_spares": round(served, 3), "spares": sandbox.DEFAULT_SPARES}))


if __name__ == "__main__":
    main()
