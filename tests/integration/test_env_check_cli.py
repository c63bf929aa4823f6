"""env-check through a subprocess: gold scores 1, the empty attempt 0, snapshots reproduce the state."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.parametrize(("name", "limit"), [("math_python", 7), ("bfcl", 8), ("multihop_qa", 8)])
def test_env_check(name: str, limit: int) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trace_rl.cli.env_check", name, "--limit", str(limit), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report == {
        **report,
        "env": name,
        "tasks": limit,
        "gold_success": limit,
        "empty_success": 0,
        "snapshot_mismatch": 0,
    }


def test_env_check_bad_name() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "trace_rl.cli.env_check", "chess"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2 and "unknown environment" in out.stderr
