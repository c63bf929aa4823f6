"""kb_hops: multi-hop questions over a generated knowledge base, answered one ``lookup`` per hop (issue 59).

The instrument for TRACE's prefix stage on multi-hop QA: each task is a seeded world of people, places and
organisations (`trace_rl.envs.kb_world`) and a question composing d relations, d in 1-4 (``config["depths"]``, mixed
round-robin in a task list). The agent has one tool, ``lookup(entity, relation)``, which returns the related entity's
name; the gold trajectory takes one hop per turn, each call starting from the name the previous call returned::

    What is the headquarters of the employer of the mother of Tavik?
    <tool_call>{"name": "lookup", "arguments": {"entity": "Tavik", "relation": "mother"}}</tool_call>  -> Morel
    <tool_call>{"name": "lookup", "arguments": {"entity": "Morel", "relation": "employer"}}</tool_call> -> Kesan
    <tool_call>{"name": "lookup", "arguments": {"entity": "Kesan", "relation": "headquarters"}}</tool_call> -> Dapul
    <answer>Dapul</answer>

so a depth-d question takes d + 1 turns. Every hop can fail: the policy must copy the previous result out of the
tool's reply and pick the next relation from the question; a wrong relation returns a real entity (a distractor:
the episode goes on, silently off the path), a miscopied name returns an error the policy may recover from on a
later turn (``max_turns`` leaves room). Because the environment is cheap and deterministic, a policy's true success
probability from any save point can be estimated by Monte Carlo (``benchmarks/kb_oracle.py``).

Reward: exact match of the answer with the gold entity (SQuAD normalisation, `trace_rl.envs.multihop_qa.exact_match`).
``info["hops_right"]`` after every turn: how many hops of the gold path the episode's lookups have followed so far
(a lookup counts when it is the next gold (entity, relation) pair), so a failed episode's first wrong hop is
``hops_right + 1`` (``depth + 1``: the answer turn).

Held-out worlds use a disjoint name vocabulary (`trace_rl.envs.kb_world.name_vocabulary`): no entity of the test
split occurs in any training, RL-pool or warm-start world.
"""

from __future__ import annotations

import random
from typing import Any, cast

from trace_rl.envs.base import AnswerEnv, EpisodeState, StepResult, ToolCall
from trace_rl.envs.kb_world import (
    STYLES,
    Question,
    World,
    make_question,
    make_world,
    name_vocabulary,
    question_text,
)
from trace_rl.envs.multihop_qa import exact_match
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAME = "kb_hops"

LOOKUP_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up one relation of an entity in the knowledge base; returns the related entity.",
        "parameters": {
            "type": "object",
            "properties": {
                "entity": {"type": "string", "description": "Entity name, e.g. Tavik."},
                "relation": {"type": "string", "description": "Relation, e.g. mother or headquarters."},
            },
            "required": ["entity", "relation"],
        },
    },
}
HINT = "Use the lookup tool, one relation per call. Put only the final answer inside <answer>...</answer>."

DEFAULT_CONFIG: dict[str, Any] = {
    "depths": [1, 2, 3, 4],
    "people": 8,
    "organisations": 4,
    "places": 4,
    "style": "nested",
}
"""Task knobs: question depths (mixed round-robin), entities per type in each world, question style
(`trace_rl.envs.kb_world.STYLES`)."""
SPLIT_SALT = {"train": 0, "test": 1}
DEFAULT_LIMIT = 1000


def _config(config: dict[str, Any] | None) -> dict[str, Any]:
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    unknown = set(cfg) - set(DEFAULT_CONFIG)
    if unknown:
        raise DataError(f"kb_hops config: unknown keys {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}")
    depths = cfg["depths"]
    if (
        not isinstance(depths, (list, tuple))
        or not depths
        or not all(isinstance(d, int) and 1 <= d <= 8 for d in depths)
    ):
        raise DataError(
            f"kb_hops config: depths must be a non-empty list of integers in 1..8, got {depths!r}"
        )
    for key in ("people", "organisations", "places"):
        if not isinstance(cfg[key], int) or cfg[key] < 2:
            raise DataError(f"kb_hops config: {key} must be an integer >= 2, got {cfg[key]!r}")
    if cfg["style"] not in STYLES:
        raise DataError(f"kb_hops config: style must be one of {STYLES}, got {cfg['style']!r}")
    return cfg


def make_task(split: str, seed: int, index: int, config: dict[str, Any] | None = None) -> Task:
    """Task ``index`` of a split: its own world (generator seeded by split, seed and index) and one question of
    depth ``depths[index % len(depths)]``.

    Raises:
        ValueError: bad config (`load_kb_tasks`), unknown split.
    """
    cfg = _config(config)
    if split not in SPLIT_SALT:
        raise DataError(f"kb_hops split must be 'train' or 'test' (or 'eval'), got {split!r}")
    rng = random.Random(f"kb_hops/{split}/{seed}/{index}")
    sizes = {"person": cfg["people"], "organisation": cfg["organisations"], "place": cfg["places"]}
    world = make_world(rng, name_vocabulary(split), sizes)
    depth = int(cfg["depths"][index % len(cfg["depths"])])
    q = make_question(rng, world, depth)
    text = question_text(q, cfg["style"])
    return Task(
        id=f"{ENV_NAME}-{split}-{seed}-{index}",
        env=ENV_NAME,
        prompt=f"{text}\n\n{HINT}",
        answer=q.answer,
        tools=(LOOKUP_TOOL,),
        metadata={
            "question": text,
            "world": world.to_json(),
            "start": q.start,
            "relations": list(q.relations),
            "path": list(q.path),
            "depth": q.depth,
        },
    )


def load_kb_tasks(
    split: str = "train",
    limit: int | None = None,
    seed: int = 0,
    *,
    config: dict[str, Any] | None = None,
) -> list[Task]:
    """``limit`` kb_hops tasks (default `DEFAULT_LIMIT`), each its own world and question.

    Args:
        split: "train", or "test" / "eval" (held out: worlds over the held-out name vocabulary).
        limit: number of tasks (>= 0).
        seed: base seed; the warm start's stream uses another (`trace_rl.train.hygiene.SFT_SEED_OFFSET`).
        config: knobs (`DEFAULT_CONFIG`; missing keys take the defaults).

    Raises:
        ValueError: unknown split or config key, depths outside 1..8, fewer than 2 entities of a type, limit < 0.
    """
    n = DEFAULT_LIMIT if limit is None else limit
    if n < 0:
        raise DataError(f"kb_hops limit must be >= 0, got {n}")
    name = "test" if split == "eval" else split
    return [make_task(name, seed, i, config) for i in range(n)]


def task_world(task: Task) -> World:
    """The world of a kb_hops task (from its metadata)."""
    return World.from_json(task.metadata.get("world"))


def task_question(task: Task) -> Question:
    """The question of a kb_hops task (start, relations in hop order, gold path)."""
    meta = task.metadata
    return Question(
        str(meta["start"]),
        tuple(str(r) for r in cast(list[Any], meta["relations"])),
        tuple(str(e) for e in cast(list[Any], meta["path"])),
    )


def lookup_call_text(entity: str, relation: str) -> str:
    """The text of one ``lookup`` call as the gold trajectory writes it."""
    import json

    return f"<tool_call>{json.dumps({'name': 'lookup', 'arguments': {'entity': entity, 'relation': relation}})}</tool_call>"


def kb_gold_trajectory(task: Task) -> list[str]:
    """Assistant turns of the gold solution: one lookup per hop along the gold path, then the answer."""
    q = task_question(task)
    calls = [lookup_call_text(e, r) for e, r in zip(q.path[:-1], q.relations, strict=True)]
    return [*calls, f"<answer>{q.answer}</answer>"]


class KbHopsEnv(AnswerEnv):
    """The kb_hops environment: `AnswerEnv` with the ``lookup`` tool over the task's world (module doc).

    State: the episode counters plus ``extra["hops_right"]`` (gold hops followed so far); the world lives in the
    task, so a snapshot (a deep copy of the `EpisodeState`) restores exactly.

    Args:
        max_turns: assistant turns before the episode ends with reward 0 (default 6: a depth-4 question takes 5).
    """

    name = ENV_NAME

    def __init__(self, *, max_turns: int = 6) -> None:
        super().__init__(max_turns=max_turns)
        self._world: tuple[object, World] | None = (
            None  # (task's world JSON, world): parsed once, not per call
        )

    def world(self, task: Task) -> World:
        """The task's `World`, parsed from its metadata once per task object."""
        data = task.metadata.get("world")
        if self._world is None or self._world[0] is not data:
            self._world = (data, task_world(task))
        return self._world[1]

    def call_tool(self, state: EpisodeState, call: ToolCall) -> str:
        entity, relation = call.arguments.get("entity"), call.arguments.get("relation")
        if not isinstance(entity, str) or not isinstance(relation, str):
            raise ValueError("lookup needs string arguments 'entity' and 'relation'")
        world = self.world(state.task)
        by_key = {e.casefold(): e for e in world.facts}
        name = by_key.get(" ".join(entity.split()).casefold(), entity.strip())
        rel = relation.strip().lower()
        try:
            value = world.lookup(name, rel)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        q = task_question(state.task)
        h = int(state.extra.get("hops_right", 0))
        if h < q.depth and (name, rel) == (q.path[h], q.relations[h]):
            state.extra["hops_right"] = h + 1
        return value

    def step(self, assistant_text: str) -> StepResult:
        result = super().step(assistant_text)
        result.info["hops_right"] = int(self.state.extra.get("hops_right", 0))
        return result

    def score(self, task: Task, answer: str) -> tuple[float, dict[str, Any]]:
        em = exact_match(answer, [str(task.answer)])
        return (1.0 if em else 0.0), {"em": em}


__all__ = [
    "DEFAULT_CONFIG",
    "ENV_NAME",
    "LOOKUP_TOOL",
    "KbHopsEnv",
    "kb_gold_trajectory",
    "load_kb_tasks",
    "lookup_call_text",
    "make_task",
    "task_question",
    "task_world",
]
