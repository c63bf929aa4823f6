"""bfcl reward parity with bfcl-eval's own multi_turn_checker (issue 16), on gold and perturbed calls."""

from __future__ import annotations

import collections

import pytest

from trace_rl.envs.base import ToolCall
from trace_rl.envs.bfcl import load_bfcl_tasks
from trace_rl.envs.bfcl_parity import (
    api_methods,
    env_reward,
    gold_calls,
    official_reward,
    perturbed_trajectories,
)


@pytest.fixture(scope="module")
def tasks():  # type: ignore[no-untyped-def]
    # every 10th scenario of each subset: base, long_context, miss_func and miss_param all appear
    return [t for t in load_bfcl_tasks("all") if int(t.id.rsplit("_", 1)[1]) % 10 == 3]


def test_default_reward_agrees_with_the_official_checker(tasks) -> None:  # type: ignore[no-untyped-def]
    seen: collections.Counter[tuple[str, float]] = collections.Counter()
    for task in tasks:
        for label, turns in perturbed_trajectories(gold_calls(task)):
            official = official_reward(task, turns)
            assert env_reward(task, turns) == official, (task.id, label)
            seen[label, official] += 1
    # the comparison is not vacuous: gold passes, and both outcomes occur among the perturbations
    assert seen["gold", 1.0] == len(tasks) and seen["gold", 0.0] == 0
    assert seen["drop_last", 0.0] > 0 and seen["duplicate", 1.0] > 0 and seen["swap", 0.0] > 0
    assert seen["call_in_empty_turn", 1.0] > 0


def test_strict_irrelevance_rejects_what_the_official_checker_accepts(tasks) -> None:  # type: ignore[no-untyped-def]
    task = next(t for t in tasks if t.metadata["subset"] == "miss_param")
    empty = next(i for i, g in enumerate(task.metadata["ground_truth"]) if not g)
    gold = gold_calls(task)
    previous = [c for steps in gold[:empty] for step in steps for c in step]
    turns = [[[previous[-1]]] if i == empty else s for i, s in enumerate(gold)]
    assert official_reward(task, turns) == 1.0 == env_reward(task, turns)
    assert env_reward(task, turns, strict_irrelevance=True) == 0.0


def test_official_reward_refuses_unsafe_call_strings(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks[0]
    gold = gold_calls(task)
    for bad in (ToolCall("open", {"file": "x"}), ToolCall("a.b", {}), ToolCall("ls", {"a": float("nan")})):
        with pytest.raises(ValueError):
            official_reward(task, [[[bad]], *gold[1:]])
    with pytest.raises(ValueError):
        official_reward(task, gold[:-1])


def test_official_reward_refuses_calls_outside_the_tasks_api(tasks, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """bfcl-eval's own helper with literal arguments would ``eval`` its inner string: only the task's API methods
    may become call strings, and nothing the refused call names runs."""
    task = tasks[0]
    gold = gold_calls(task)
    marker = tmp_path / "marker"
    inner = f"open({str(marker)!r}, 'w').write('ran')"
    hostile = ToolCall(
        "execute_multi_turn_func_call",
        {
            "func_call_list": [inner],
            "initial_config": {},
            "involved_classes": [],
            "model_name": "x",
            "test_entry_id": "y",
        },
    )
    for bad in (hostile, ToolCall("multi_turn_checker", {}), ToolCall("print", {})):
        with pytest.raises(ValueError, match="API methods"):
            official_reward(task, [[[bad]], *gold[1:]])
    assert not marker.exists()
    first = gold[0][0][0]
    assert first.name in api_methods(task)  # the gold calls themselves stay allowed
    assert official_reward(task, gold) == 1.0
