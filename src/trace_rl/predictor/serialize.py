"""Serialization of an anchor (a prompt plus the interaction history up to a turn) into predictor text.

The predictor reads one string per anchor. The format is plain and model-agnostic::

    [PROMPT]
    <the task prompt>
    [TURN 1]
    <assistant text of turn 1>
    [OBSERVATION 1]
    <environment reply to turn 1>
    [TURN 2]
    ...

A prompt-level anchor (depth 0) is just the ``[PROMPT]`` block. Turn numbers are absolute (turn t is the t-th
turn of the rollout), so the depth of the anchor survives when old turns are dropped.

Truncation (ours; the paper does not say): the text never exceeds ``max_chars`` characters. The prompt is
always kept; it is shortened (head and tail kept, middle replaced by ``[...]``) only when it is longer than half
the budget AND the history needs the room. Old history goes first: turns are added newest-first while they fit
and a marker ``[k EARLIER TURNS OMITTED]`` stands in for the dropped ones. When even the newest turn does not fit,
its tail is kept (the most recent observation is the most informative part of the state).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: Smallest budget accepted by :func:`serialize_anchor` (room for the headers and a little content).
MIN_CHARS = 64
_ELLIPSIS = "\n[...]\n"


class TurnLike(Protocol):
    """Anything with the two text fields of :class:`trace_rl.types.Turn`."""

    @property
    def text(self) -> str: ...

    @property
    def observation(self) -> str: ...


def _clip_middle(s: str, limit: int) -> str:
    """``s`` if it fits in ``limit`` characters, else its head and tail joined by ``[...]`` (length == limit)."""
    if len(s) <= limit:
        return s
    keep = max(limit - len(_ELLIPSIS), 0)
    head = keep - keep // 2
    tail = keep // 2
    return (s[:head] + _ELLIPSIS + (s[len(s) - tail :] if tail else ""))[:limit]


def _clip_head(s: str, limit: int) -> str:
    """The last ``limit`` characters of ``s``, starting with ``[...]`` when anything was cut."""
    if len(s) <= limit:
        return s
    keep = max(limit - len(_ELLIPSIS), 0)
    return (_ELLIPSIS + s[len(s) - keep :])[-limit:] if keep else s[len(s) - limit :]


def turn_block(turn: TurnLike, index: int) -> str:
    """Text block of the ``index``-th turn (1-based): ``[TURN i]`` + assistant text, then its observation."""
    block = f"[TURN {index}]\n{turn.text}\n"
    if turn.observation:
        block += f"[OBSERVATION {index}]\n{turn.observation}\n"
    return block


def _omitted(k: int) -> str:
    return f"[{k} EARLIER TURNS OMITTED]\n"


def serialize_anchor(prompt: str, turns: Sequence[TurnLike] = (), *, max_chars: int = 4096) -> str:
    """Serialize a prompt and the turns up to an anchor into one string of at most ``max_chars`` characters.

    Args:
        prompt: the task prompt (first user message), always present in the output.
        turns: the turns from the first one down to the anchor, oldest first (empty for a prompt-level anchor).
        max_chars: character budget of the output, at least ``MIN_CHARS`` (64).

    Returns:
        The serialized text (format and truncation rule in the module docstring); ``len(result) <= max_chars``.

    Raises:
        ValueError: ``prompt`` is not a string, ``max_chars`` is too small, or a turn lacks ``text`` /
            ``observation`` strings.
    """
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be a string; got {type(prompt).__name__}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be an integer >= {MIN_CHARS}; got {max_chars!r}")
    blocks: list[str] = []
    for i, turn in enumerate(turns):
        text = getattr(turn, "text", None)
        obs = getattr(turn, "observation", None)
        if not isinstance(text, str) or not isinstance(obs, str):
            raise ValueError(
                f"turn {i + 1} must have string fields 'text' and 'observation'; got {turn!r:.80}"
            )
        blocks.append(turn_block(turn, i + 1))

    header = "[PROMPT]\n"
    prompt_block = header + prompt + "\n"
    history = sum(len(b) for b in blocks)
    # The prompt keeps its full length unless it is longer than half the budget and the history needs room.
    prompt_limit = max(max_chars - min(history, max_chars // 2), max_chars // 2)
    if len(prompt_block) > prompt_limit:
        prompt_block = header + _clip_middle(prompt, prompt_limit - len(header) - 1) + "\n"
    room = max_chars - len(prompt_block)

    kept: list[str] = []  # newest first
    first_kept = len(blocks)  # index of the oldest turn kept (whole or clipped)
    for j in range(len(blocks) - 1, -1, -1):
        marker = len(_omitted(j)) if j else 0  # room for the marker if turns 1..j end up dropped
        if len(blocks[j]) + marker <= room:
            kept.append(blocks[j])
            room -= len(blocks[j])
            first_kept = j
            continue
        if not kept and room - marker > 0:  # the newest turn alone does not fit: keep its tail
            kept.append(_clip_head(blocks[j], room - marker))
            room -= len(kept[-1])
            first_kept = j
        break
    if first_kept > 0 and len(_omitted(first_kept)) <= room:
        kept.append(_omitted(first_kept))
    return prompt_block + "".join(reversed(kept))


def clip_token_ids(ids: Sequence[int], max_len: int, head: int) -> list[int]:
    """Clip a token id sequence to ``max_len`` ids keeping its first ``head`` and its last ``max_len - head``.

    The serializer already bounds texts in characters; this is the backbone's safety net in tokens, and it keeps
    both the prompt (head) and the most recent turns (tail) instead of cutting the end off.

    Raises:
        ValueError: ``max_len < 1`` or ``head`` outside [0, max_len].
    """
    if max_len < 1 or not 0 <= head <= max_len:
        raise ValueError(f"need max_len >= 1 and 0 <= head <= max_len; got max_len={max_len}, head={head}")
    out = list(ids)
    if len(out) <= max_len:
        return out
    tail = max_len - head
    return out[:head] + (out[len(out) - tail :] if tail else [])
