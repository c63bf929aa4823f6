"""`DEVICE=cpu bash scripts/device_check.sh`: the GPU check's CPU smoke test, with the figures it prints on a GPU."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

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
        steps = re.findall(rf"^{check} step \d: [\d.]+ s, \d+ tokens, \d+ tokens/s in generation", out, re.M)
        assert len(steps) == 3, out
        assert re.search(
            rf"^{check}: 3 steps in [\d.]+ s .*peak memory \d+ MiB \(CPU process peak RSS\)", out, re.M
        )
    assert out.rstrip().endswith("device_check: PASS")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["check"] for s in summary] == ["tiny", "qwen3-scratch"]
    assert all(s["steps"] == 3 and s["tokens_per_s"] > 0 and s["peak_memory_mib"] > 0 for s in summary)
