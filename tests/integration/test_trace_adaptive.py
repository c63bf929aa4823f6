"""`trace_adaptive` end to end: it trains through the CLI, logs its decisions, and a resumed run allocates from the
state its checkpoint kept (issue 58)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "trace_rl.cli.main"]


def _train(folder: Path) -> list[dict]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == "train"]


def test_trace_adaptive_trains_and_resumes_from_its_state(tmp_path) -> None:
    out = tmp_path / "run"
    args = [
        "--preset",
        "smoke",
        "--set",
        "method=trace_adaptive",
        "--set",
        "checkpoint_every=1",
        "--no-progress",
    ]
    res = subprocess.run(
        [*CLI, "train", *args, "--steps", "4", "--set", "eval_every=0", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    recs = _train(out)
    assert recs[0]["allocation"] == "treepo"  # cold start: uniform roots, random anchors
    warm = [r for r in recs if r["allocation"] == "trace_adaptive"]
    assert warm, [r["allocation"] for r in recs]
    for r in warm:
        assert {"adaptive_kappa", "adaptive_replays_on", "adaptive_flip_rate", "adaptive_covered"} <= set(r)
        assert r["budget_spent"] == r["budget_total"]
        assert (
            r["root_rollouts"] in (16, 24) or r["replays"] == 0
        )  # smoke: M = 16 roots + N M replays, or 24 roots
    config = json.loads((out / "config.json").read_text())
    assert config["provenance"]["resolved"]["update"]["estimator"] == "tree_grpo"
    # resume from step 2's checkpoint: step 3 allocates from the restored state exactly as the run did
    again = tmp_path / "again"
    shutil.copytree(out, again)
    for step in (3, 4):
        shutil.rmtree(again / "checkpoints" / f"step_{step}", ignore_errors=True)
    res = subprocess.run(
        [*CLI, "train", "--resume", str(again), "--no-progress"], capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr[-2000:]
    first, second = _train(out)[2], _train(again)[2]
    assert first["step"] == second["step"] == 3
    keys = [k for k in first if k.startswith("adaptive_")] + ["allocation", "active_prompts"]
    assert {k: first.get(k) for k in keys} == {k: second.get(k) for k in keys}
