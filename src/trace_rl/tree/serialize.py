"""JSON form of rollout trees and their turns: JSON-ready dicts and files, and the checks on what is read.

`RolloutTree.to_dict` / `from_dict` / `save` / `load` delegate here. The record is one JSON object (format name
`FORMAT_NAME`, version `FORMAT_VERSION`): the tree's arrays as lists (NaN rewards as null), one `turn_to_dict`
object per node (null at the root and where no payload was given), the prompt's token ids and its ``meta``.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from trace_rl.types import Turn

if TYPE_CHECKING:
    from trace_rl.tree.rollout_tree import RolloutTree

FORMAT_NAME = "trace_rl.RolloutTree"
FORMAT_VERSION = 1


def turn_to_dict(turn: Turn) -> dict[str, Any]:
    """A JSON-ready dict of a turn: arrays become lists (float32 logprobs round-trip exactly through float)."""
    return {
        "token_ids": turn.token_ids.tolist(),
        "loss_mask": turn.loss_mask.tolist(),
        "logprobs": turn.logprobs.tolist(),
        "text": turn.text,
        "observation": turn.observation,
        "info": turn.info,
    }


def turn_from_dict(data: dict[str, Any]) -> Turn:
    """Inverse of `turn_to_dict`.

    Raises:
        ValueError: a field is missing or has the wrong type.
    """
    if not isinstance(data, dict):
        raise ValueError(f"a turn must be a JSON object, got {type(data).__name__}")
    try:
        return Turn(
            token_ids=np.asarray(data["token_ids"], dtype=np.int64).reshape(-1),
            loss_mask=np.asarray(data["loss_mask"], dtype=np.int8).reshape(-1),
            logprobs=np.asarray(data["logprobs"], dtype=np.float32).reshape(-1),
            text=str(data.get("text", "")),
            observation=str(data.get("observation", "")),
            info=dict(data.get("info", {})),
        )
    except KeyError as exc:
        raise ValueError(f"turn record is missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"turn record has a malformed field: {exc}") from None


def tree_to_dict(tree: RolloutTree) -> dict[str, Any]:
    """A JSON-ready dict of ``tree`` (NaN rewards become null); `tree_from_dict` inverts it exactly.

    ``meta`` is copied with numpy scalars and arrays turned into Python numbers and lists.

    Raises:
        ValueError: ``meta`` holds a value JSON cannot represent (a non-finite float, a non-string key, an
            arbitrary object); the message names the field.
    """
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "parent": tree.parent.tolist(),
        "reward": [None if math.isnan(r) else r for r in tree.reward.tolist()],
        "is_replay": tree.is_replay.tolist(),
        "turns": [None if t is None else turn_to_dict(t) for t in tree.turns],
        "prompt_ids": [int(x) for x in tree.prompt_ids],
        "meta": _json_value(tree.meta, "meta"),
    }


def tree_from_dict(data: dict[str, Any], cls: type[RolloutTree]) -> RolloutTree:
    """Inverse of `tree_to_dict`: the record's checks, then ``cls.from_parents``.

    Raises:
        ValueError: not a RolloutTree record, an unknown version, or invalid arrays (see `from_parents`).
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ValueError(f"not a {FORMAT_NAME} record")
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"unsupported {FORMAT_NAME} version {data.get('version')!r} (expected {FORMAT_VERSION})"
        )
    try:
        parent = data["parent"]
        reward = [math.nan if r is None else r for r in data["reward"]]
        turns = [None if t is None else turn_from_dict(t) for t in data["turns"]]
        is_replay = _bool_list(data["is_replay"], "is_replay")
        prompt_ids = data.get("prompt_ids")
        if prompt_ids is not None and not (
            isinstance(prompt_ids, list)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt_ids)
        ):
            raise ValueError("tree record field 'prompt_ids' must be a list of integer token ids")
        meta = data.get("meta")
        if meta is not None and not isinstance(meta, dict):
            raise ValueError(f"tree record field 'meta' must be an object, got {type(meta).__name__}")
    except KeyError as exc:
        raise ValueError(f"tree record is missing field {exc.args[0]!r}") from None
    except TypeError as exc:
        raise ValueError(f"tree record has a malformed field: {exc}") from None
    return cls.from_parents(
        parent,
        reward,
        turns,
        is_replay=is_replay,
        prompt_ids=prompt_ids,
        meta=meta,
    )


def save_tree(tree: RolloutTree, path: str | os.PathLike[str]) -> None:
    """Write ``tree.to_dict()`` as one JSON document (UTF-8), atomically (write to a temp file, then rename; the
    temp file is removed when writing fails).

    Raises:
        ValueError: ``meta`` is not JSON-representable (see `tree_to_dict`).
    """
    tmp = f"{os.fspath(path)}.tmp"
    text = json.dumps(tree.to_dict(), allow_nan=False)  # raises before any file is touched
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_tree(path: str | os.PathLike[str], cls: type[RolloutTree]) -> RolloutTree:
    """Read a tree written by `save_tree`, through ``cls.from_dict``.

    Raises:
        ValueError: the file is not valid JSON or not a RolloutTree record.
    """
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{os.fspath(path)}: not valid JSON ({exc})") from None
    return cls.from_dict(data)


def _bool_list(value: Any, field: str) -> npt.NDArray[np.bool_]:
    """A JSON list of booleans (0 and 1 accepted) as a bool array; anything else is a ValueError."""
    if not isinstance(value, list) or not all(
        isinstance(v, bool) or (isinstance(v, int) and v in (0, 1)) for v in value
    ):
        raise ValueError(f"tree record field {field!r} must be a list of booleans")
    return np.asarray(value, dtype=np.bool_)


def _json_value(value: Any, where: str) -> Any:
    """A JSON-ready copy of ``value``: numpy scalars and arrays become Python numbers and lists.

    Raises:
        ValueError: a non-finite float, a non-string dict key, or a value of another type (``where`` names it).
    """
    if isinstance(value, np.ndarray):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value.tolist())]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} = {value} is not a finite number; JSON cannot hold it")
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} has key {k!r}; JSON object keys must be strings")
            out[k] = _json_value(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ValueError(f"{where} holds a {type(value).__name__}, which is not JSON-serialisable")
