"""Seeded knowledge-base worlds and multi-hop questions over them (the data of the ``kb_hops`` environment).

A world is a small set of typed entities (people, places, organisations) and functional relations between them:

    person        mother -> person, friend -> person, employer -> organisation, hometown -> place
    organisation  founder -> person, headquarters -> place
    place         mayor -> person

Every entity has exactly one value for each relation of its type, drawn uniformly from the entities of the target
type (never itself), so a composed question has one answer. A question of depth d composes d relations from a start
entity along a path of d + 1 distinct entities ("What is the headquarters of the employer of the mother of Tavik?":
mother, then employer, then headquarters); its answer is the path's last entity.

Names come from a generated vocabulary (consonant-vowel syllables: ``Tavik``, ``Morel``), split in two by a stable
hash of the name: worlds of the training split draw only from one part and worlds of the held-out split only from
the other, so no held-out world shares an entity name with any training world (issue 59, the data-hygiene rules of
`trace_rl.train.hygiene`). Everything is generated from seeds; nothing is read from disk or network.
"""

from __future__ import annotations

import functools
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ENTITY_TYPES = ("person", "organisation", "place")
RELATIONS: dict[str, dict[str, str]] = {
    "person": {"mother": "person", "friend": "person", "employer": "organisation", "hometown": "place"},
    "organisation": {"founder": "person", "headquarters": "place"},
    "place": {"mayor": "person"},
}
"""Relations of each entity type: relation name -> type of its value."""
RELATION_NAMES = tuple(r for rels in RELATIONS.values() for r in rels)

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "n", "r", "l", "s", "k")
HELD_OUT_SHARE = 5
"""One name in HELD_OUT_SHARE (by CRC-32 of the name) belongs to the held-out vocabulary, the rest to training."""


@functools.cache
def name_vocabulary(split: str) -> tuple[str, ...]:
    """The entity names a split's worlds draw from: two syllables (consonant-vowel, consonant-vowel, optional coda),
    capitalised; "test" keeps the names whose CRC-32 is 0 mod `HELD_OUT_SHARE`, "train" the others (disjoint).

    Raises:
        ValueError: a split other than "train" or "test".
    """
    if split not in ("train", "test"):
        raise ValueError(f"kb_hops name split must be 'train' or 'test', got {split!r}")
    held = split == "test"
    names = []
    for a in _ONSETS:
        for v in _VOWELS:
            for b in _ONSETS:
                for w in _VOWELS:
                    for c in _CODAS:
                        name = f"{a}{v}{b}{w}{c}".capitalize()
                        if (zlib.crc32(name.encode()) % HELD_OUT_SHARE == 0) == held:
                            names.append(name)
    return tuple(names)


@dataclass(frozen=True)
class World:
    """One generated world.

    Attributes:
        types: entity name -> its type (one of `ENTITY_TYPES`).
        facts: entity name -> {relation name -> value entity name}, every relation of the entity's type.
    """

    types: dict[str, str]
    facts: dict[str, dict[str, str]]

    def lookup(self, entity: str, relation: str) -> str:
        """The value of ``relation`` for ``entity`` (exact names; the env normalises case before calling).

        Raises:
            KeyError: unknown entity, or a relation its type does not have (the message says which).
        """
        if entity not in self.facts:
            raise KeyError(f"no entity named {entity!r}")
        if relation not in self.facts[entity]:
            has = ", ".join(self.facts[entity])
            raise KeyError(f"{entity} ({self.types[entity]}) has no relation {relation!r}; it has {has}")
        return self.facts[entity][relation]

    def to_json(self) -> dict[str, Any]:
        """JSON form stored in a task's metadata (`World.from_json` reads it back)."""
        return {"types": dict(self.types), "facts": {e: dict(r) for e, r in self.facts.items()}}

    @staticmethod
    def from_json(data: Any) -> World:
        """Inverse of `to_json`.

        Raises:
            ValueError: not the shape `to_json` writes.
        """
        if not isinstance(data, dict) or not isinstance(data.get("types"), dict):
            raise ValueError("a kb_hops world needs 'types' and 'facts' objects")
        facts = data.get("facts")
        if not isinstance(facts, dict) or set(facts) != set(data["types"]):
            raise ValueError("a kb_hops world's 'facts' must have one entry per entity of 'types'")
        return World(
            {str(k): str(v) for k, v in data["types"].items()}, {str(e): dict(r) for e, r in facts.items()}
        )


def make_world(rng: random.Random, names: Sequence[str], sizes: dict[str, int]) -> World:
    """A world with ``sizes[t]`` entities of each type, names drawn without replacement from ``names``.

    Raises:
        ValueError: a type with fewer than 2 entities (a person's mother must be another person), or more
            entities asked for than names available.
    """
    total = sum(sizes.get(t, 0) for t in ENTITY_TYPES)
    if any(sizes.get(t, 0) < 2 for t in ENTITY_TYPES):
        raise ValueError(f"a kb_hops world needs at least 2 entities of each type, got {sizes}")
    if total > len(names):
        raise ValueError(f"a world of {total} entities needs more names than the {len(names)} available")
    drawn = rng.sample(list(names), total)
    types: dict[str, str] = {}
    by_type: dict[str, list[str]] = {}
    pos = 0
    for t in ENTITY_TYPES:
        by_type[t] = drawn[pos : pos + sizes[t]]
        pos += sizes[t]
        types.update(dict.fromkeys(by_type[t], t))
    facts: dict[str, dict[str, str]] = {}
    for entity, t in types.items():
        facts[entity] = {
            rel: rng.choice([x for x in by_type[target] if x != entity])
            for rel, target in RELATIONS[t].items()
        }
    return World(types, facts)


@dataclass(frozen=True)
class Question:
    """A d-hop question: ``start`` and ``relations`` (hop order); ``path`` the d + 1 entities visited (distinct),
    ``path[-1]`` the answer."""

    start: str
    relations: tuple[str, ...]
    path: tuple[str, ...]

    @property
    def depth(self) -> int:
        return len(self.relations)

    @property
    def answer(self) -> str:
        return self.path[-1]


def make_question(rng: random.Random, world: World, depth: int, *, tries: int = 200) -> Question:
    """A random ``depth``-hop question over ``world`` whose path visits ``depth + 1`` distinct entities (so the
    answer never appears in the question and no hop returns to an entity already seen).

    Raises:
        ValueError: depth < 1, or no such path found in ``tries`` draws (a world too small for the depth).
    """
    if depth < 1:
        raise ValueError(f"question depth must be >= 1, got {depth}")
    entities = sorted(world.types)
    for _ in range(tries):
        here = rng.choice(entities)
        path, rels = [here], []
        for _ in range(depth):
            rel = rng.choice(sorted(world.facts[here]))
            here = world.facts[here][rel]
            if here in path:
                break
            path.append(here)
            rels.append(rel)
        if len(rels) == depth:
            return Question(path[0], tuple(rels), tuple(path))
    raise ValueError(
        f"no {depth}-hop question with distinct entities found in {tries} draws; use a larger world"
    )


STYLES = ("nested", "chain")


def question_text(q: Question, style: str = "nested") -> str:
    """The question in words. "nested" composes the relations as English does, the last hop first ("What is the
    headquarters of the employer of the mother of Tavik?"); "chain" lists them in hop order ("Start at Tavik and
    follow mother, then employer, then headquarters. Which entity do you reach?").

    Raises:
        ValueError: unknown style.
    """
    if style == "nested":
        return "What is " + " of ".join(f"the {r}" for r in reversed(q.relations)) + f" of {q.start}?"
    if style == "chain":
        return (
            f"Start at {q.start} and follow " + ", then ".join(q.relations) + ". Which entity do you reach?"
        )
    raise ValueError(f"question style must be one of {STYLES}, got {style!r}")


__all__ = [
    "ENTITY_TYPES",
    "HELD_OUT_SHARE",
    "RELATIONS",
    "RELATION_NAMES",
    "STYLES",
    "Question",
    "World",
    "make_question",
    "make_world",
    "name_vocabulary",
    "question_text",
]
