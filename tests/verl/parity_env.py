"""A test environment for the verl tests: a fixed number of turns, terminal reward = parity of the final turn's
text length. For a randomly initialised policy that is a fair coin per rollout, so rollout trees hold both
outcomes and tree advantages are not all zero. Follows the trace-rl Env protocol (reset/step/snapshot/restore).

Ray workers import it by name (`make_parity_env`): the tests put this folder on the workers' PYTHONPATH.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from trace_rl.types import Task


@dataclass(frozen=True)
class ParityStep:
    observation: str
    reward: float
    done: bool
    info: dict[str, object] = field(default_factory=dict)


class ParityEnv:
    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns
        self._state: dict[str, object] = {}

    def reset(self, task: Task) -> str:
        self._state = {"turn": 0, "lengths": [], "fail_replays": bool(task.metadata.get("fail_replays"))}
        # metadata "fill": n words appended to the first observation (a prompt that fills the context, as BFCL's
        # tool schemas do, while verl's own view of the row stays short)
        return task.prompt + " x" * int(task.metadata.get("fill", 0))  # type: ignore[call-overload]

    def step(self, assistant_text: str) -> ParityStep:
        turn = int(self._state["turn"]) + 1  # type: ignore[call-overload]
        self._state["turn"] = turn
        lengths = self._state["lengths"]
        assert isinstance(lengths, list)
        lengths.append(len(assistant_text))
        if turn >= self.max_turns:
            return ParityStep("", float(len(assistant_text) % 2), True, {"turn": turn})
        return ParityStep(f"turn {turn} done, {len(assistant_text)} characters", 0.0, False, {"turn": turn})

    def snapshot(self) -> object:
        return copy.deepcopy(self._state)

    def restore(self, state: object) -> None:
        assert isinstance(state, dict)
        if state.get("fail_replays"):  # metadata "fail_replays": a replay's session raises (a failed session)
            raise RuntimeError("parity env: replays of this task fail")
        self._state = copy.deepcopy(state)


def make_parity_env(max_turns: int) -> ParityEnv:
    return ParityEnv(max_turns=max_turns)
