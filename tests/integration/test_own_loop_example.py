"""examples/own_loop.py: TRACE's allocation, trees and advantages inside a researcher's own loop."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_loop.py"


def test_the_example_runs_as_a_script() -> None:
    res = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", "2"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("step   1  effective ratio")


def test_the_example_spends_its_budget_and_learns() -> None:
    spec = importlib.util.spec_from_file_location("own_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    own_loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(own_loop)
    records = own_loop.run(30, seed=0)
    # M roots plus N replays per root at half a rollout each, every step; never more prompts than the baseline batch
    assert all(r["budget_spent"] == own_loop.M * (1 + own_loop.N / 2) for r in records)
    assert all(0 < r["active_prompts"] <= own_loop.MAX_ACTIVE for r in records)
    success = np.array([r["success_rate"] for r in records])
    assert (
        success[-10:].mean() > success[:5].mean() + 0.1
    )  # the tree advantages move the policy toward the code
