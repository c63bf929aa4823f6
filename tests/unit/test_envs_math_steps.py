"""math_steps (issue 13): stepwise gold trajectories, the fold, task loading and the env's save points."""

from __future__ import annotations

import pytest

from trace_rl.envs import gold_trajectory, load_tasks, make_env
from trace_rl.envs.math_steps import fold_steps


def test_fold_is_left_to_right() -> None:
    assert fold_steps("15 - 43 - 75 + 72") == [
        ("print(15 - 43)", -28),
        ("print(-28 - 75)", -103),
        ("print(-103 + 72)", -31),
    ]
    assert fold_steps("3 + 4") == [("print(3 + 4)", 7)]
    for bad in ("3", "3 +", "3 * 4", "3 + x", "3 + 4 5"):
        with pytest.raises(ValueError, match="not a chain"):
            fold_steps(bad)


def test_tasks_vary_in_length_and_have_own_split() -> None:
    train = load_tasks("math_steps", "train", limit=60)
    test = load_tasks("math_steps", "test", limit=60)
    assert all(t.env == "math_steps" and t.id.startswith("math_steps-") for t in train)
    assert {t.id for t in train}.isdisjoint({t.id for t in test})
    turns = {len(gold_trajectory(t)) for t in train}
    assert turns == {3, 4, 5, 6}  # 3-6 terms: T - 1 calls and the answer
    same = load_tasks("math_steps", "eval", limit=60)
    assert [(t.id, t.prompt, t.answer) for t in same] == [(t.id, t.prompt, t.answer) for t in test]


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        load_tasks("math_steps", "train", limit=2, config={"terms": 3})
    with pytest.raises(ValueError, match="min_terms"):
        load_tasks("math_steps", "train", limit=2, config={"min_terms": 1, "max_terms": 3})
    short = load_tasks("math_steps", "train", limit=20, config={"min_terms": 2, "max_terms": 2})
    assert {len(gold_trajectory(t)) for t in short} == {2}


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_gold_solves_and_every_save_point_restores(index: int) -> None:
    task = load_tasks("math_steps", "train", limit=8)[index]
    turns = gold_trajectory(task)
    env = make_env("math_steps")
    assert env.max_turns == 8
    env.reset(task)
    snapshots = []
    for text in turns[:-1]:
        r = env.step(text)
        assert not r.done and r.info["role"] == "tool"
        snapshots.append(env.snapshot())
    assert env.step(turns[-1]).reward == 1.0
    # each mid-episode save point replays to the same ending on a fresh env, and a wrong step fails
    for k, state in enumerate(snapshots):
        fresh = make_env("math_steps")
        fresh.restore(state)
        for text in turns[k + 1 : -1]:
            fresh.step(text)
        assert fresh.step(turns[-1]).reward == 1.0
    wrong = make_env("math_steps")
    wrong.restore(snapshots[0])
    assert wrong.step(f"<answer>{int(task.answer or 0) + 1}</answer>").reward == 0.0


def test_intermediate_result_is_printed_by_the_tool() -> None:
    task = load_tasks("math_steps", "train", limit=1)[0]
    expression = str(task.metadata["question"]).split(":")[-1].strip(" =")
    env = make_env("math_steps")
    env.reset(task)
    first = env.step(gold_trajectory(task)[0])
    assert first.observation.strip() == str(fold_steps(expression)[0][1])
