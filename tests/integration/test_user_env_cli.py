"""`trace-rl train --set env.name=my_pkg.my_env:make`: one TRACE step on a researcher's own environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

USER_ENV = Path(__file__).resolve().parents[1] / "fixtures" / "user_env"


def test_train_with_a_user_environment(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(USER_ENV), os.environ.get("PYTHONPATH", "")]))
    args = [
        "--preset",
        "smoke",
        "--steps",
        "1",
        "--set",
        "env.name=my_pkg.my_env:make",
        "--set",
        "env.eval_tasks=0",
    ]
    res = subprocess.run(
        [sys.executable, "-m", "trace_rl.cli.main", "train", *args, "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((out / "config.json").read_text())["env"]["name"] == "my_pkg.my_env:make"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if r.get("kind") == "train"]
    assert step["step"] == 1 and step["root_rollouts"] > 0 and step["tokens_generated"] > 0

    cli = [sys.executable, "-m", "trace_rl.cli.main", "train", "--preset", "smoke"]
    bad = subprocess.run(
        [*cli, "--set", "env.name=my_pkg.nope:make", "--out", str(tmp_path / "bad")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad.returncode == 2 and "env.name: environment 'my_pkg.nope:make': cannot import" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
