"""Anchor serialization: format, truncation order, budgets."""

from __future__ import annotations

import pytest

from trace_rl.predictor.serialize import clip_token_ids, serialize_anchor
from trace_rl.types import Turn


def test_prompt_only_and_turn_format() -> None:
    assert serialize_anchor("What is 2+2?") == "[PROMPT]\nWhat is 2+2?\n"
    text = serialize_anchor("Q", [Turn(text="call", observation="4"), Turn(text="<answer>4</answer>")])
    assert text == "[PROMPT]\nQ\n[TURN 1]\ncall\n[OBSERVATION 1]\n4\n[TURN 2]\n<answer>4</answer>\n"


def test_old_turns_are_dropped_first_and_the_prompt_is_kept() -> None:
    turns = [Turn(text=f"step{i}" + "x" * 40, observation="o" * 10) for i in range(1, 6)]
    text = serialize_anchor("PROMPT TEXT", turns, max_chars=220)
    assert len(text) == 211
    assert text.startswith("[PROMPT]\nPROMPT TEXT\n")
    # turn block: "[TURN 5]\n" 9 + text 45 + 1 + "[OBSERVATION 5]\n" 16 + 10 + 1 = 82 chars; prompt block
    # 9 + 11 + 1 = 21, room 199. Turn 5: 82 + marker 26 <= 199 (room 117); turn 4: 82 + 26 <= 117 (room 35);
    # turn 3: 82 + 26 > 35, stop; the marker "[3 EARLIER TURNS OMITTED]\n" (26) fits: 21 + 26 + 164 = 211
    assert "[TURN 5]" in text and "[TURN 4]" in text and "[TURN 3]" not in text
    assert "[3 EARLIER TURNS OMITTED]" in text
    assert text.index("[3 EARLIER") < text.index("[TURN 4]") < text.index("[TURN 5]")


def test_newest_turn_too_long_keeps_its_tail() -> None:
    turns = [Turn(text="old", observation=""), Turn(text="a" * 500 + "THE END", observation="")]
    text = serialize_anchor("P", turns, max_chars=100)
    assert len(text) <= 100
    assert text.startswith("[PROMPT]\nP\n")
    assert "THE END" in text and "[1 EARLIER TURNS OMITTED]" in text


def test_long_prompt_is_clipped_in_the_middle_only_when_history_needs_room() -> None:
    prompt = "HEAD" + "m" * 300 + "TAIL"
    alone = serialize_anchor(prompt, max_chars=400)
    assert prompt in alone  # fits whole: no history competes for the room
    text = serialize_anchor(prompt, [Turn(text="t" * 300)], max_chars=200)
    assert len(text) <= 200
    assert "HEAD" in text and "TAIL" in text and "[...]" in text


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="prompt"):
        serialize_anchor(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_chars"):
        serialize_anchor("p", max_chars=10)
    with pytest.raises(ValueError, match="turn 1"):
        serialize_anchor("p", [object()])  # type: ignore[list-item]


def test_clip_token_ids_keeps_head_and_tail() -> None:
    assert clip_token_ids(range(10), 6, 2) == [0, 1, 6, 7, 8, 9]
    assert clip_token_ids(range(4), 6, 2) == [0, 1, 2, 3]
    assert clip_token_ids(range(10), 3, 3) == [0, 1, 2]
    with pytest.raises(ValueError):
        clip_token_ids([1], 2, 3)
