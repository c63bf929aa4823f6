"""`trace-rl train`'s closing summary line reads what the run logged and leaves out what a step did not log."""

from __future__ import annotations

import json
from pathlib import Path

from trace_rl.cli.train import summary_line


def test_summary_line_leaves_out_a_metric_a_step_did_not_log(tmp_path: Path) -> None:
    records = [
        {"step": 1, "kind": "train", "effective_ratio": 0.5, "success_rate": 0.25, "budget_spent": 64.0},
        {"step": 2, "kind": "train", "success_rate": 0.75, "budget_spent": 32.0},  # no effective ratio
        {"step": 2, "kind": "eval", "eval_accuracy": 0.4},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    line = summary_line(str(tmp_path))
    assert line.startswith("summary: 2 steps")
    assert "effective ratio" not in line
    assert "mean success rate 0.500" in line and "budget spent per step 48.0" in line
