"""`DEVICE=cpu bash scripts/device_check.sh`: the GPU check's CPU smoke test, with the figures it prints on a GPU,
and its failure when the policy-gradient update never sees an advantage."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_on_cpu_prints_tokens_per_second_step_times_and_peak_memory(tmp_path: Path) -> None:
    env = dict(os.environ, DEVICE="cpu", OUT=str(tmp_path), PYTHON=sys.executable)
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = res.stdout
    for check in ("tiny", "qwen3-scratch"):
        steps = re.findall(
            rf"^{check} step \d: [\d.]+ s, \d+ tokens, \d+ tokens/s in generation, update [\d.]+ s, "
            rf"update_rows (\d+) of \d+ paths, grad norm ([\d.e+-]+|-), predictor [\d.]+ s$",
            out,
            re.M,
        )
        assert len(steps) == 3, out
        # the acceptance of issue 42: a policy-gradient step with signal in at least one step of each check
        assert any(int(rows) > 0 and grad != "-" and float(grad) > 0 for rows, grad in steps), out
        assert re.search(
            rf"^{check}: 3 steps in [\d.]+ s .*update_rows [\d, ]+ \(\d+ in all\), update [\d.]+ s in all, "
            rf"peak memory \d+ MiB \(CPU process peak RSS\)",
            out,
            re.M,
        ), out
    assert out.rstrip().endswith("device_check: PASS")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["check"] for s in summary] == ["tiny", "qwen3-scratch"]
    assert all(s["steps"] == 3 and s["tokens_per_s"] > 0 and s["peak_memory_mib"] > 0 for s in summary)
    for s in summary:
        assert len(s["update_rows"]) == len(s["update_seconds"]) == 3 and sum(s["update_rows"]) > 0
        assert all(r <= p for r, p in zip(s["update_rows"], s["update_paths"], strict=True))
        assert s["problems"] == []


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("predictor.updates=1e15", "predictor.updates: must lie in [0, 10000]"),
        ("budget.rootz=3", "budget.rootz: unknown key"),
        ("justtext", "override 'justtext': expected section.key=value"),
    ],
)
def test_a_bad_set_is_one_line_before_anything_is_built(tmp_path: Path, setting: str, message: str) -> None:
    # issue 60: a bad SET printed a traceback (after building the scratch policy)
    env = dict(os.environ, DEVICE="cpu", OUT=str(tmp_path), PYTHON=sys.executable, SET=setting)
    res = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("device_check: bad setting (SET / --set): "), res.stdout
    assert message in lines[0] and res.stderr == "", res.stdout + res.stderr  # no traceback
    assert list(tmp_path.iterdir()) == []  # nothing built


def load_script() -> Any:
    """scripts/device_check.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("device_check", ROOT / "scripts" / "device_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_device_check_fails_when_no_step_has_a_row_with_signal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # in this process (the subprocess above shows the script's wiring; this saves a second torch import in CI):
    # the plain arithmetic env, where a random-init policy never answers correctly, so every group agrees
    import torch

    threads = torch.get_num_threads()
    try:
        rc = load_script().main(
            [
                *("--device", "cpu", "--steps", "1", "--checks", "qwen3-scratch", "--out", str(tmp_path)),
                *("--set", "env.name=trace_rl.rollout.toy_env:ArithmeticToolEnv"),
            ]
        )
    finally:
        torch.set_num_threads(threads)  # the trainer set one thread (threads=1 on CPU)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "tiny step" not in out
    assert re.search(r"^qwen3-scratch step 1: .*update_rows 0 of \d+ paths", out, re.M), out
    assert "device_check: qwen3-scratch: no step had a row with signal (update_rows 0)" in out
    assert out.rstrip().endswith("device_check: FAIL (qwen3-scratch)")
    (summary,) = json.loads((tmp_path / "summary.json").read_text())
    assert summary["update_rows"] == [0] and summary["problems"]


def test_check_problems_names_each_failure() -> None:
    module = load_script()

    def summary(rows: list[int], grads: list[float | None], losses: list[float | None]) -> dict[str, object]:
        return {"steps": len(rows), "update_rows": rows, "update_grad_norm": grads, "update_loss": losses}

    assert module.check_problems(summary([0, 5, 0], [None, 0.3, None], [None, 0.1, None]), 3) == []
    assert module.check_problems(summary([0, 5], [None, 0.3], [None, 0.1]), 3) == ["2 of 3 steps recorded"]
    (no_signal,) = module.check_problems(summary([0, 0, 0], [None] * 3, [None] * 3), 3)
    assert no_signal.startswith("no step had a row with signal (update_rows 0, 0, 0)")
    assert module.check_problems(summary([4, 5], [0.0, float("nan")], [0.1, float("inf")]), 2) == [
        "step 1: 4 rows with signal but gradient norm 0.0",
        "step 2: 5 rows with signal but gradient norm nan",
        "step 2: 5 rows with signal but loss inf",
    ]
