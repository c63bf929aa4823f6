"""JSON-ready conversion of `Turn` records (used by `RolloutTree.to_dict` / `save`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_rl.types import Turn


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


def validate_turn(turn: Turn, where: str) -> None:
    """Check that a turn's token arrays agree in length.

    Raises:
        ValueError: the three arrays differ in length, or the loss mask holds values other than 0 and 1.
    """
    if not isinstance(turn, Turn):
        raise ValueError(f"{where}: expected a trace_rl.types.Turn, got {type(turn).__name__}")
    n = turn.token_ids.shape[0]
    if turn.loss_mask.shape != (n,) or turn.logprobs.shape != (n,):
        raise ValueError(
            f"{where}: token_ids, loss_mask and logprobs must have the same length, got "
            f"{turn.token_ids.shape}, {turn.loss_mask.shape}, {turn.logprobs.shape}"
        )
    if n and not np.isin(turn.loss_mask, (0, 1)).all():
        raise ValueError(f"{where}: loss_mask must hold only 0 and 1")
