"""The tiny learned predictor trained online on the lab (issue 7: error by depth on the lab simulator).

Training: 12 TRACE steps at 64x2 with `build_predictor("tiny")` plugged into `trace_rl.lab.method_step`, trained
after each step by `OnlineTrainer` on `node_examples` of the step's trees (trace_rl.cli.lab_learned, LAB_ONLINE).
Evaluation: every non-leaf node of 48 fresh held-out prompts x 4 root rollouts, `error_by_depth` against the
bottom-up targets and against the lab's true probabilities.

What is asserted, and why (measured after 12 steps with training seeds 0 / 1; the test uses seed 0; margins
are set outside both):
* prefixes (depth >= 1): the observations ("progress", "setback", ...) reveal where V_t moved, so a trained model
  beats the constant 0.5. Measured MSE vs target 0.184 / 0.207 (constant 0.250), vs truth 0.095 / 0.130
  (constant 0.166 / 0.179), Spearman vs target 0.49 / 0.53.
* prompt level: a lab prompt's text ("lab task lab-<i>") carries NO information about its difficulty (the lab's
  design), so no text predictor can beat the best constant there; 0.5 is the family's mean. The model is in fact
  slightly worse (vs truth 0.156 / 0.233 against 0.127 / 0.157: it follows the mean of recent steps' targets). We
  assert it stays within 0.1 of the constant, not that it beats it.
* the error against the truth shrinks from the prompt level to the prefixes (the paper's error-by-turn shape).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.cli.lab_learned import (  # noqa: E402
    ConstantPredictor,
    LearnedLabPredictor,
    depth_rows,
    depth_table,
    train_on_lab,
)
from trace_rl.lab import OraclePredictor  # noqa: E402
from trace_rl.predictor import build_predictor  # noqa: E402


@pytest.fixture(scope="module")
def trained() -> tuple[object, list[dict[str, float]]]:
    torch.set_num_threads(1)
    model = build_predictor("tiny", seed=0)
    cold = depth_table({"learned": LearnedLabPredictor(model)}, prompts=4, rollouts=2, seed=7)
    assert np.all(cold.predictions["learned"] == 0.5)  # cold start: the prior everywhere
    log = train_on_lab(model, steps=12, method="trace", shape="64x2", seed=0)
    return model, log


def test_training_runs_the_method_step_with_the_learned_predictor(trained) -> None:
    model, log = trained
    assert len(log) == 12
    assert model.is_warm and model.num_updates == sum(m["predictor/updates"] for m in log) > 12
    for m in log:
        assert 0.0 <= m["effective_ratio"] <= 1.0
        assert m["examples"] > m["prompt_examples"] >= 1  # prefixes and prompts both reach the trainer
        assert math.isfinite(m["predictor/train_loss"])


def test_error_by_depth_on_held_out_lab_trees(trained) -> None:
    model, _ = trained
    preds = {
        "learned": LearnedLabPredictor(model),
        "constant": ConstantPredictor(0.5),
        "oracle": OraclePredictor(),
    }
    table = depth_table(preds, prompts=48, rollouts=4, seed=1000)
    rows = {r["depth"]: r for r in depth_rows(table, max_depth=6)}
    for depth in ("0", "1", "2", "3", "4", "5", ">=6"):
        row = rows[depth]
        assert row["count"] >= 20
        for key in ("learned/mse_target", "learned/mse_truth", "constant/mse_target", "oracle/mse_target"):
            assert math.isfinite(row[key]), (depth, key)
        # the oracle has zero error against the truth and is the floor against the noisy targets
        assert row["oracle/mse_truth"] == 0.0
        assert row["oracle/mse_target"] < row["constant/mse_target"]
    prefix, prompt = rows["prefix"], rows["prompt"]
    # prefixes: the learned model beats the constant prior with a margin, against targets and against the truth
    assert prefix["learned/mse_target"] < 0.9 * prefix["constant/mse_target"]
    assert prefix["learned/mse_truth"] < 0.8 * prefix["constant/mse_truth"]
    assert prefix["learned/spearman_target"] > 0.3
    for depth in ("2", "3", "4", "5", ">=6"):
        assert rows[depth]["learned/mse_truth"] < rows[depth]["constant/mse_truth"], depth
    # prompt level: no information in the text, so the model must stay close to the constant
    assert abs(prompt["learned/mse_truth"] - prompt["constant/mse_truth"]) < 0.1
    # the error against the truth shrinks from the prompt level to the prefixes
    assert prefix["learned/mse_truth"] < 0.8 * prompt["learned/mse_truth"]


def test_cli_lab_predictor_json() -> None:
    cmd = [sys.executable, "-m", "trace_rl.cli.main", "lab", "predictor", "--json"]
    out = subprocess.run(
        [*cmd, "--steps", "1", "--seeds", "2", "--eval-prompts", "4"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(out.stdout)
    assert report["training"]["steps"] == 1 and report["training"]["updates"] >= 1
    depths = [r["depth"] for r in report["error_by_depth"]]
    assert depths[0] == "0" and depths[-2:] == ["prompt", "prefix"]
    er = report["effective_ratio"]
    assert er["seeds"] == 2
    assert er["trace/oracle/share_of_oracle"]["mean"] == 1.0
    for arm in ("treepo", "trace/oracle", "trace/learned", "trace_prefix_only/learned"):
        assert 0.0 <= er[arm]["mean"] <= 1.0
    bad = subprocess.run([*cmd, "--seeds", "1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "at least 2" in bad.stderr
