"""kb_hops (issue 59): generated worlds, held-out vocabulary, gold trajectories, the lookup tool and save points."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trace_rl.envs import gold_trajectory, load_tasks, make_env
from trace_rl.envs.kb_hops import lookup_call_text, task_question, task_world
from trace_rl.envs.kb_world import (
    RELATIONS,
    Question,
    World,
    make_question,
    make_world,
    name_vocabulary,
    question_text,
)


def test_name_vocabularies_are_disjoint_and_held_out_worlds_share_no_entity() -> None:
    train, test = set(name_vocabulary("train")), set(name_vocabulary("test"))
    assert train.isdisjoint(test) and len(test) > 1000 and len(train) > 4 * len(test) - 1000
    train_names = {e for t in load_tasks("kb_hops", "train", limit=200) for e in task_world(t).types}
    sft_names = {e for t in load_tasks("kb_hops", "train", limit=200, seed=7) for e in task_world(t).types}
    held = {e for t in load_tasks("kb_hops", "test", limit=200) for e in task_world(t).types}
    assert held <= test and train_names | sft_names <= train
    assert held.isdisjoint(train_names | sft_names)
    with pytest.raises(ValueError, match="train' or 'test"):
        name_vocabulary("dev")


def test_world_is_typed_and_functional() -> None:
    world = make_world(
        random.Random(3), name_vocabulary("train"), {"person": 4, "organisation": 2, "place": 2}
    )
    assert Counter(world.types.values()) == {"person": 4, "organisation": 2, "place": 2}
    for entity, rels in world.facts.items():
        assert set(rels) == set(RELATIONS[world.types[entity]])
        for rel, value in rels.items():
            assert value != entity and world.types[value] == RELATIONS[world.types[entity]][rel]
    assert World.from_json(world.to_json()) == world
    person = next(e for e, t in world.types.items() if t == "person")
    with pytest.raises(KeyError, match="has no relation 'mayor'; it has mother"):
        world.lookup(person, "mayor")
    with pytest.raises(KeyError, match="no entity named 'Nobody'"):
        world.lookup("Nobody", "mother")
    with pytest.raises(ValueError, match="at least 2 entities"):
        make_world(random.Random(0), name_vocabulary("train"), {"person": 1, "organisation": 2, "place": 2})


def test_question_path_follows_the_world_and_reads_in_both_styles() -> None:
    world = make_world(
        random.Random(5), name_vocabulary("train"), {"person": 8, "organisation": 4, "place": 4}
    )
    for depth in (1, 2, 3, 4):
        q = make_question(random.Random(depth), world, depth)
        assert q.depth == depth and len(set(q.path)) == depth + 1
        for h, rel in enumerate(q.relations):
            assert world.lookup(q.path[h], rel) == q.path[h + 1]
    q = Question("Tavik", ("mother", "employer", "headquarters"), ("Tavik", "Morel", "Kesan", "Dapul"))
    assert question_text(q) == "What is the headquarters of the employer of the mother of Tavik?"
    assert question_text(q, "chain") == (
        "Start at Tavik and follow mother, then employer, then headquarters. Which entity do you reach?"
    )
    with pytest.raises(ValueError, match="style"):
        question_text(q, "prose")
    with pytest.raises(ValueError, match="depth must be >= 1"):
        make_question(random.Random(0), world, 0)


def test_tasks_mix_depths_are_seeded_and_validate_their_config() -> None:
    tasks = load_tasks("kb_hops", "train", limit=40)
    assert Counter(int(str(t.metadata["depth"])) for t in tasks) == {1: 10, 2: 10, 3: 10, 4: 10}
    assert {len(gold_trajectory(t)) for t in tasks} == {2, 3, 4, 5}  # d lookups and the answer
    again = load_tasks("kb_hops", "train", limit=40)
    assert [(t.prompt, t.answer, t.metadata) for t in tasks] == [
        (t.prompt, t.answer, t.metadata) for t in again
    ]
    other = load_tasks("kb_hops", "train", limit=40, seed=1)
    assert [t.prompt for t in tasks] != [t.prompt for t in other]
    assert [t.id for t in load_tasks("kb_hops", "eval", limit=3)] == [
        t.id for t in load_tasks("kb_hops", "test", limit=3)
    ]
    only3 = load_tasks("kb_hops", "train", limit=6, config={"depths": [3], "style": "chain"})
    assert {t.metadata["depth"] for t in only3} == {3} and all(t.prompt.startswith("Start at") for t in only3)
    for bad, match in [
        ({"depth": [3]}, "unknown keys"),
        ({"depths": []}, "depths"),
        ({"depths": [0]}, "depths"),
        ({"people": 1}, "people"),
        ({"style": "prose"}, "style"),
    ]:
        with pytest.raises(ValueError, match=match):
            load_tasks("kb_hops", "train", limit=2, config=bad)
    with pytest.raises(ValueError, match="split"):
        load_tasks("kb_hops", "dev", limit=2)


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_gold_solves_and_every_save_point_restores(index: int) -> None:
    task = load_tasks("kb_hops", "train", limit=8, seed=2)[index]
    q = task_question(task)
    turns = gold_trajectory(task)
    env = make_env("kb_hops")
    assert env.max_turns == 6
    env.reset(task)
    snapshots, observations = [], []
    for h, text in enumerate(turns[:-1]):
        r = env.step(text)
        assert not r.done and r.info["role"] == "tool" and r.info["hops_right"] == h + 1
        observations.append(r.observation)
        snapshots.append(env.snapshot())
    assert observations == list(q.path[1:])
    last = env.step(turns[-1])
    assert last.reward == 1.0 and last.done and last.info["hops_right"] == q.depth
    # each save point continues exactly as the original on a fresh env; stepping after a snapshot never changes it
    for k, state in enumerate(snapshots):
        fresh = make_env("kb_hops")
        fresh.restore(state)
        seen = [fresh.step(text).observation for text in turns[k + 1 : -1]]
        assert seen == observations[k + 1 :]
        assert fresh.step(turns[-1]).reward == 1.0
        again = make_env("kb_hops")
        again.restore(state)
        assert (
            again.step(f"<answer>{q.path[0]}</answer>").reward == 0.0
        )  # the start entity is never the answer


def test_wrong_hops_miscopies_and_recovery() -> None:
    task = load_tasks("kb_hops", "train", limit=8, config={"depths": [2]})[0]
    q, world = task_question(task), task_world(task)
    env = make_env("kb_hops")
    env.reset(task)
    miss = env.step(lookup_call_text(q.path[0][:-1], q.relations[0]))  # a miscopied name: an error, no hop
    assert miss.observation.startswith("Error: no entity named") and miss.info["hops_right"] == 0
    saved = env.snapshot()
    wrong_rel = next(r for r in world.facts[q.path[0]] if world.facts[q.path[0]][r] != q.path[1])
    off = env.step(lookup_call_text(q.path[0].upper(), wrong_rel))  # case is forgiven; a distractor entity
    assert off.observation == world.facts[q.path[0]][wrong_rel] and off.info["hops_right"] == 0
    env.restore(saved)  # back before the wrong relation: the gold hops still count
    for h in range(2):
        assert env.step(lookup_call_text(q.path[h], q.relations[h])).info["hops_right"] == h + 1
    assert env.step(f"<answer> {q.answer.lower()} </answer>").reward == 1.0
    bad_args = make_env("kb_hops")
    bad_args.reset(task)
    r = bad_args.step('<tool_call>{"name": "lookup", "arguments": {"entity": "X"}}</tool_call>')
    assert "needs string arguments" in r.observation and not r.done


def test_max_turns_ends_with_reward_zero() -> None:
    task = load_tasks("kb_hops", "train", limit=4, config={"depths": [4]})[0]
    env = make_env("kb_hops", max_turns=2)
    env.reset(task)
    turns = gold_trajectory(task)
    assert not env.step(turns[0]).done
    end = env.step(turns[1])
    assert end.done and end.reward == 0.0 and end.info["truncated"]
