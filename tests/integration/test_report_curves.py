"""`trace-rl report` on a synthetic compare folder: learning curves against generated rollouts and tokens, the
table of final pass@1 / AUC / rollouts to GRPO's final pass@1 with paired intervals, and the cost columns.

Three methods x three seeds, 10 steps each, evaluations at steps 0, 5, 10 (hand numbers in the comments):
- grpo: 64 rollouts per step, logged without ``rollouts_generated`` (budget_spent stands in); pass@1 0.20, 0.30,
  0.40 (+ 0.01 x seed): final 0.35 + 0.01 s, reached at 480 of its 640 rollouts.
- dapo: 128 generated rollouts per step (half discarded; all counted in budget_spent), pass@1 0.20, 0.30, 0.33 (+ 0.01 s): never reaches
  GRPO's final pass@1.
- trace: 96 generated rollouts per step (replays count 1) for 64 rollout-equivalents (a replay costs 0.5),
  pass@1 0.20, 0.40, 0.50 (+ 0.02 s).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "trace_rl.cli.main"]
METHODS = {  # method -> (rollouts generated per step or None, rollout-eq., tokens, tool calls, pass@1, slope)
    "grpo": (None, 64.0, 1000, 4, (0.20, 0.30, 0.40), 0.01),
    "dapo": (128, 128.0, 2000, 8, (0.20, 0.30, 0.33), 0.01),
    "trace": (96, 64.0, 900, 3, (0.20, 0.40, 0.50), 0.02),
}


def write_folder(root: Path) -> None:
    table = {}
    for method, (generated, spent, tokens, tools, accuracy, slope) in METHODS.items():
        runs = []
        for seed in range(3):
            records: list[dict] = [{"kind": "eval", "step": 0, "eval_accuracy": accuracy[0] + slope * seed}]
            for step in range(1, 11):
                rec = {
                    "kind": "train",
                    "step": step,
                    "method": method,
                    "budget_spent": spent,
                    "budget_total": 64.0,
                    "effective_ratio": 0.5,
                    "success_rate": 0.4,
                    "tokens_generated": tokens,
                    "tool_calls": tools,
                    "wall_s": 2.0,
                }
                if generated is not None:
                    rec["rollouts_generated"] = generated
                records.append(rec)
                if step % 5 == 0:
                    acc = accuracy[step // 5] + slope * seed
                    records.append({"kind": "eval", "step": step, "eval_accuracy": acc, "eval_tasks": 64})
            folder = root / method / f"seed_{seed}"
            folder.mkdir(parents=True)
            (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            evals = [r["eval_accuracy"] for r in records if r["kind"] == "eval"]
            runs.append(  # what compare keeps per seed (train.rundir.summarize)
                {"effective_ratio": 0.5, "success_rate": 0.4, "budget_spent": spent, "wall_s": 2.0}
                | {"eval_accuracy": evals[-1], "eval_accuracy_first": evals[0]}
            )
        table[method] = {"seeds": 3, "method": method, "runs": runs}
    (root / "comparison.json").write_text(
        json.dumps({"preset": "demo", "budget_total": 64.0, "methods": table})
    )


def cells(page: str, role: str) -> dict[str, list[str]]:
    section = re.search(rf"<table data-role='{role}'>(.*?)</table>", page, re.S)
    assert section, role
    rows = re.findall(r"<tr data-row='(\w+)'>(.*?)</tr>", section.group(1), re.S)
    return {
        m: [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td>(.*?)</td>", r, re.S)][1:]
        for m, r in rows
    }


def test_report_draws_learning_curves_and_their_table(tmp_path) -> None:
    write_folder(tmp_path)
    res = subprocess.run([*CLI, "report", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    page = (tmp_path / "report.html").read_text()
    for name in ("accuracy_vs_rollouts.png", "accuracy_vs_rollout_eq.png", "accuracy_vs_tokens.png"):
        assert name in page and (tmp_path / "report" / name).stat().st_size > 1000

    curve = cells(page, "curve-table")
    # columns: seeds, final, final - grpo, AUC, AUC - grpo, rollouts to grpo's final, share, rollouts-to - grpo
    grpo, dapo, trace = curve["grpo"], curve["dapo"], curve["trace"]
    t2 = 4.303 / math.sqrt(3)  # t_{0.975, 2} / sqrt(3)
    assert grpo[1] == f"36.0 % ± {100 * t2 * 0.01:.1f} pts"  # 0.35 + 0.01 s, s = 0, 1, 2
    assert grpo[2] == grpo[4] == grpo[7] == "baseline"
    # AUC over [0, 640] generated rollouts (GRPO's end): (320 x 0.25 + 320 x 0.35) / 640 = 0.30 (+ 0.01 s)
    assert grpo[3].startswith("31.0 %")
    assert grpo[5].startswith("480 ") and grpo[6].startswith("75.0 %")  # half way from 320 to 640
    # trace: final 0.45 + 0.02 s; paired difference 0.10 + 0.01 s -> 11.0 +- t2 x 1.0 points
    assert trace[2] == f"+11.0 [{11 - 100 * t2 * 0.01:+.1f}, {11 + 100 * t2 * 0.01:+.1f}] pts"
    # trace AUC: 480 x 0.3 + 160 x (0.4 + 0.4333) / 2 = 210.67 over 640 = 0.3292 (+ 0.02 s); minus GRPO's
    auc_diff = 100 * (210.0 + 2 / 3 - 192.0) / 640 + 1.0
    assert (
        trace[4]
        == f"+{auc_diff:.1f} [{auc_diff - 100 * t2 * 0.01:+.1f}, {auc_diff + 100 * t2 * 0.01:+.1f}] pts"
    )
    # trace reaches 0.35 + 0.01 s at (0.15 - 0.01 s) / 0.2 x 480 = 360, 336, 312 rollouts; share of GRPO's 640
    assert trace[5].startswith("336 ") and trace[6].startswith("52.5 %")
    assert trace[7] == f"-144 [{-144 - t2 * 24:.1f}, {-144 + t2 * 24:.1f}]"  # paired: 360, 336, 312 minus 480
    assert dapo[5] == "not reached" and dapo[7] == "–"
    # against GRPO's own first crossing of its final (480 rollouts on every seed) rather than its whole run (640):
    # 360, 336, 312 / 480 = 0.75, 0.70, 0.65
    assert grpo[8].startswith("100.0 %") and trace[8].startswith("70.0 %") and dapo[8] == "–"

    # on the rollout-equivalents axis GRPO and TRACE spend 64 a step, DAPO 128: the common range is [0, 640] again;
    # columns: seeds, AUC, AUC - grpo, rollout-eq. to grpo's final, share, difference
    eq = cells(page, "curve-table-rollout_equivalents")
    assert (
        eq["grpo"][1].startswith("31.0 %")
        and eq["grpo"][3].startswith("480 ")
        and eq["dapo"][3] == "not reached"
    )
    # trace: pass@1 0.20, 0.40, 0.50 (+ 0.02 s) at 0, 320, 640: (320 x 0.3 + 320 x 0.45) / 640 = 0.375 (+ 0.02 s)
    assert eq["trace"][1].startswith("39.5 %") and eq["trace"][2].startswith("+8.5 [")
    # reaches 0.35 + 0.01 s at (0.15 - 0.01 s) / 0.2 x 320 = 240, 224, 208 rollout-eq.; share of GRPO's 640
    assert eq["trace"][3].startswith("224 ") and eq["trace"][4].startswith("35.0 %")
    raw = cells(page, "cost-table")
    cost = {m: [c.split(" ±")[0] for c in row] for m, row in raw.items()}
    # columns: steps, rollouts / step, total, rollout-eq / step, total, tokens / step, total, tools / step, total
    assert cost["dapo"][:5] == ["10", "128", "1,280", "128", "1,280"]
    assert cost["trace"][1:5] == ["96", "960", "64", "640"]
    assert cost["trace"][5:] == ["900", "9,000", "3", "30", "0"]  # no probe charged in these logs
    assert cost["grpo"][1:3] == ["64", "640"] and "budget_spent stands in" in page  # not logged: the fallback
    assert [c.endswith("*") for c in raw["grpo"][:4]] == [False, True, True, False]
    assert not any(c.endswith("*") for c in raw["trace"])
