"""bfcl: checker semantics, user-turn observations, isolation between episodes, save points."""

from __future__ import annotations

import json

import pytest

from trace_rl.envs import gold_trajectory, load_tasks, make_env
from trace_rl.envs.bfcl import load_bfcl_tasks, parse_call_string


@pytest.fixture(scope="module")
def tasks():  # type: ignore[no-untyped-def]
    return {t.id: t for t in load_bfcl_tasks("all")}


def test_split_is_80_20_and_scenario_disjoint() -> None:
    train, test = load_tasks("bfcl", "train"), load_tasks("bfcl", "test")
    assert (len(train), len(test)) == (640, 160)  # 4 subsets x 200 scenarios, 160/40 scenarios
    idx = lambda ts: {t.id.rsplit("_", 1)[1] for t in ts}  # noqa: E731
    assert not idx(train) & idx(test)


def test_parse_call_string_uses_literals_only() -> None:
    assert parse_call_string("mv(source='a', destination='b')") == (
        "mv",
        [],
        {"source": "a", "destination": "b"},
    )
    assert parse_call_string("sort('f.txt')") == ("sort", ["f.txt"], {})
    with pytest.raises(ValueError):
        parse_call_string("__import__('os').system('ls')")


def test_gold_passes_and_user_turn_comes_back_as_observation(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks["multi_turn_base_0"]
    env = make_env("bfcl")
    assert env.reset(task) == task.prompt
    roles, reward = [], None
    for turn in gold_trajectory(task):
        r = env.step(turn)
        roles.append(r.info["role"])
        if r.info["role"] == "user" and not r.done:
            assert r.observation == task.metadata["user_turns"][r.info["user_turn"] + 1][0]
        reward = r.reward
    assert reward == 1.0 and roles.count("user") == len(task.metadata["user_turns"])


def test_wrong_state_fails(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks["multi_turn_base_0"]
    env = make_env("bfcl")
    env.reset(task)
    env.step('<tool_call>{"name": "mkdir", "arguments": {"dir_name": "elsewhere"}}</tool_call>')
    r = env.step("done")
    assert r.done and r.reward == 0.0 and "turn 0" in r.info["failure"]


def test_miss_param_turn_needs_no_call(tasks) -> None:  # type: ignore[no-untyped-def]
    task = next(t for t in tasks.values() if t.metadata["subset"] == "miss_param")
    empty_turn = next(i for i, g in enumerate(task.metadata["ground_truth"]) if not g)
    turns = gold_trajectory(task)
    env = make_env("bfcl")
    env.reset(task)
    user_turn, i = 0, 0
    while user_turn < empty_turn:  # play the gold up to the turn that lacks a parameter
        r = env.step(turns[i])
        i += 1
        user_turn += r.info["role"] == "user"
    # a call in that turn fails the episode only under the strict irrelevance rule (bfcl-eval's
    # multi_turn_irrelevance_checker, which its runner does not apply); by default the turn is not checked
    call = (
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
        if "ls" in {t["function"]["name"] for t in task.tools}
        else '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    )
    strict = make_env("bfcl", strict_irrelevance=True)
    strict.restore(env.snapshot())
    env.step(call)
    r = env.step("ok")
    assert r.info["turn_passed"]
    strict.step(call)
    r = strict.step("ok")
    assert r.done and r.reward == 0.0 and "none should be" in r.info["failure"]


def test_episodes_do_not_share_state(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks["multi_turn_base_0"]
    a, b = make_env("bfcl"), make_env("bfcl")
    a.reset(task)
    b.reset(task)
    a.step('<tool_call>{"name": "cd", "arguments": {"folder": "document"}}</tool_call>')
    ra = a.step('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>').observation
    rb = b.step('<tool_call>{"name": "pwd", "arguments": {}}</tool_call>').observation
    assert json.loads(ra)["current_working_directory"] != json.loads(rb)["current_working_directory"]
    assert task.metadata["initial_config"]["GorillaFileSystem"]["root"]  # the task itself is untouched


def test_snapshot_restore_reproduces_state(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks["multi_turn_base_1"]
    turns = gold_trajectory(task)
    env = make_env("bfcl")
    env.reset(task)
    for t in turns[:2]:
        env.step(t)
    state = env.snapshot()
    rest_original = [env.step(t) for t in turns[2:]]
    fresh = make_env("bfcl")
    fresh.restore(state)
    rest_replay = [fresh.step(t) for t in turns[2:]]
    assert [r.observation for r in rest_original] == [r.observation for r in rest_replay]
    assert rest_replay[-1].reward == 1.0


def test_answer_with_calls_lists_ignored_calls_and_runs_none(tasks) -> None:  # type: ignore[no-untyped-def]
    task = tasks["multi_turn_base_0"]
    env = make_env("bfcl")
    env.reset(task)
    r = env.step(
        '<tool_call>{"name": "mkdir", "arguments": {"dir_name": "zz"}}</tool_call>'
        '<tool_call>{"name": "pwd", "arguments": {}}</tool_call><answer>all done</answer>'
    )
    assert r.info["ignored_calls"] == ["mkdir", "pwd"] and r.info["role"] == "user"
    assert env.state.model_results == []  # nothing ran
    env.reset(task)
    assert "ignored_calls" not in env.step("no calls here").info


def _pad_turn_to(task, steps: int):  # type: ignore[no-untyped-def]
    """The gold's first turn followed by read-only pwd calls, one step each, to ``steps`` call steps."""
    from trace_rl.envs.base import ToolCall
    from trace_rl.envs.bfcl_parity import gold_calls

    gold = gold_calls(task)
    first = [[c] for c in gold[0][0]]
    first += [[ToolCall("pwd", {})] for _ in range(steps - len(first))]
    return [first, *gold[1:]]


@pytest.mark.parametrize(("steps", "reward"), [(20, 1.0), (21, 0.0)])
def test_step_limit_matches_bfcl_forced_termination(tasks, steps, reward) -> None:  # type: ignore[no-untyped-def]
    from trace_rl.envs.bfcl_parity import env_reward, official_reward

    task = tasks["multi_turn_base_0"]
    turns = _pad_turn_to(task, steps)
    assert official_reward(task, turns) == reward
    assert env_reward(task, turns) == reward
