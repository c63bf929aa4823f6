"""examples/trl/ run as written (tiny policy, math_python, 2 steps each), from a scratch working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "trl"


@pytest.mark.timeout(1800)  # a 2-step run takes about 30 s on a quiet machine, up to 8 min on a loaded one
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("grpo_rollout_func.py", ["step 0: treepo roots 4", "step 1: trace roots 4"]),
        ("async_grpo_worker.py", ["step 1 (policy v1): treepo roots 8", "(policy v2): trace roots 8"]),
    ],
)
def test_example_runs(script: str, expected: list[str], tmp_path: Any) -> None:
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for line in expected:
        assert line in done.stdout, done.stdout[-3000:]
