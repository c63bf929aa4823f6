"""Issue 58's per-step selection diagnostics (`trace_rl.train.selection`) and the refusal of `scripts/paired_runs.py`
to pair runs made on different code."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from trace_rl.train.selection import selection_fields
from trace_rl.types import Task

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("paired_runs_script_c", ROOT / "scripts" / "paired_runs.py")
assert _spec is not None and _spec.loader is not None
paired_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paired_runs)


def _task(i: int, chars: int) -> Task:
    return Task(id=f"t{i}", env="lab", prompt="x" * chars)


def _result(task: Task, rewards: list[float]) -> SimpleNamespace:
    return SimpleNamespace(task=task, roots=[SimpleNamespace(reward=r) for r in rewards])


def test_selection_fields_by_hand() -> None:
    pool = [_task(0, 10), _task(1, 20), _task(2, 30), _task(3, 40)]
    v = [0.1, 0.5, 0.9, 0.3]
    # prompts 0, 1, 2 active; root success 0.0, 0.5, 1.0 rises with v: Spearman 1
    active = [_result(pool[0], [0, 0]), _result(pool[1], [1, 0]), _result(pool[2], [1, 1])]
    turns = {"t0": 2, "t1": 3, "t2": 4, "t3": 5}
    out = selection_fields(pool, v, active, gold_turns=lambda t: turns[t.id])
    assert out["predictor_root_spearman"] == pytest.approx(1.0)
    assert out["selected_predicted"] == pytest.approx(0.5)
    assert out["pool_predicted"] == pytest.approx(0.45)
    assert out["selected_prompt_chars"] == pytest.approx(20.0)
    assert out["pool_prompt_chars"] == pytest.approx(25.0)
    assert out["selected_gold_turns"] == pytest.approx(3.0)
    assert out["pool_gold_turns"] == pytest.approx(3.5)
    # reversed outcomes: Spearman -1
    flipped = [_result(pool[0], [1, 1]), _result(pool[1], [1, 0]), _result(pool[2], [0, 0])]
    assert selection_fields(pool, v, flipped, gold_turns=lambda t: 1)[
        "predictor_root_spearman"
    ] == pytest.approx(-1)


def test_selection_fields_edges() -> None:
    pool = [_task(0, 10), _task(1, 20)]
    # fewer than 3 active prompts: no rank correlation; no gold solution: no turn fields
    out = selection_fields(pool, [0.2, 0.4], [_result(pool[0], [1, 0])], gold_turns=lambda t: None)
    assert math.isnan(out["predictor_root_spearman"])
    assert "selected_gold_turns" not in out
    none = selection_fields(pool, [0.2, 0.4], [], gold_turns=lambda t: 1)
    assert math.isnan(none["selected_predicted"]) and none["pool_predicted"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="one estimate per pool task"):
        selection_fields(pool, [0.2], [], gold_turns=lambda t: 1)
    with pytest.raises(ValueError, match="not in the step's candidate pool"):
        selection_fields(pool, [0.2, 0.4], [_result(_task(9, 1), [1])], gold_turns=lambda t: 1)


def _config(commit: str, dirty: bool = False, resumed: list[dict] | None = None) -> dict:
    block = {"code_commit": commit, "code_dirty": dirty, "warm_start_hash": "sha256:aa"}
    if resumed:
        block["resumed_code_commits"] = resumed
    return {"provenance": block}


def _logs(keys: list[tuple[str, int]]) -> dict:
    return {k: [] for k in keys}


def test_paired_runs_refuses_pairs_across_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paired_runs, "log_finished", lambda log, cfg: True)
    monkeypatch.setattr(paired_runs, "shared_differences", lambda configs: [])
    keys = [("grpo", 0), ("trace", 0), ("grpo", 1), ("trace", 1)]
    same = {k: _config("a" * 40) for k in keys}
    assert paired_runs.check_runs(_logs(keys), same, allow_partial=False, baseline="grpo") is None
    # seed 1's trace ran other code: refused, naming both runs and their commits
    other = {**same, ("trace", 1): _config("b" * 40)}
    refusal = paired_runs.check_runs(_logs(keys), other, allow_partial=False, baseline="grpo")
    assert (
        refusal is not None
        and "trace/seed_1 (code bbbbbbb)" in refusal
        and "grpo/seed_1 (code aaaaaaa)" in refusal
    )
    assert (
        paired_runs.check_runs(
            _logs(keys), other, allow_partial=False, baseline="grpo", allow_mixed_commits=True
        )
        is None
    )
    # a dirty tree, or a resume on another commit, is refused the same way
    dirty = {**same, ("grpo", 0): _config("a" * 40, dirty=True)}
    assert "dirty" in (paired_runs.check_runs(_logs(keys), dirty, allow_partial=False, baseline="grpo") or "")
    resumed = {
        **same,
        ("trace", 0): _config("a" * 40, resumed=[{"code_commit": "c" * 40, "code_dirty": False}]),
    }
    refusal = paired_runs.check_runs(_logs(keys), resumed, allow_partial=False, baseline="grpo")
    assert refusal is not None and "code aaaaaaa+ccccccc" in refusal
    # runs of different seeds are never paired with each other, so their commits may differ
    by_seed = {
        ("grpo", 0): _config("a" * 40),
        ("trace", 0): _config("a" * 40),
        ("grpo", 1): _config("d" * 40),
        ("trace", 1): _config("d" * 40),
    }
    assert paired_runs.check_runs(_logs(keys), by_seed, allow_partial=False, baseline="grpo") is None
