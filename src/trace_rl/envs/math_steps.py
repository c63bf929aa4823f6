"""math_steps: multi-step arithmetic with the sandboxed ``python`` tool, one call per operation (issue 13).

The task family behind the ``multistep`` preset: TRACE's prefix stage needs episodes with several uncertain
decisions, where a mid-episode state still has a success probability strictly between 0 and 1. Prompts are
reasoning-gym ``chain_sum`` problems (``15 - 43 - 75 + 72 =``: additions and subtractions of 1-2 digit numbers,
evaluated left to right). The gold trajectory folds the chain one operation per turn, each call starting from
the number the previous call printed::

    <tool_call>{"name": "python", "arguments": {"code": "print(15 - 43)"}}</tool_call>     -> -28
    <tool_call>{"name": "python", "arguments": {"code": "print(-28 - 75)"}}</tool_call>    -> -103
    <tool_call>{"name": "python", "arguments": {"code": "print(-103 + 72)"}}</tool_call>   -> -31
    <answer>-31</answer>

so a problem of T terms takes T turns (T - 1 calls and the answer). Every turn can fail: the policy must copy
the previous result out of the tool's output and find the next operator and operand in the prompt. After a
wrong intermediate result the episode is all but lost; after a right one its chance is that of the remaining
operations, which is what makes the save points after each call undecided anchors. Difficulty varies with the
prompt: the number of terms (turns) and digits, repeated operands (which make the next operand ambiguous to
find) and results that change sign or length.

Environment, tool and reward are those of `trace_rl.envs.math_python` (the reward is the final answer only:
the policy may compute however it likes). The held-out split ("test", also "eval") is the same generator at
another seed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trace_rl.envs.math_python import MathPythonEnv, _entry, _tool_call_text, load_math_tasks
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAME = "math_steps"

SYSTEM_HINT = (
    "Work from left to right with the python tool: one call per operation, each starting from the number the "
    "previous call printed. Put only the final answer inside <answer>...</answer>."
)

DEFAULT_CONFIG: dict[str, Any] = {"min_terms": 3, "max_terms": 6, "min_digits": 1, "max_digits": 2}
"""reasoning-gym ``chain_sum`` difficulty knobs: 3-6 terms (3-6 turns) of 1-2 digits."""


def load_step_tasks(
    split: str = "train",
    limit: int | None = None,
    seed: int = 0,
    *,
    config: dict[str, Any] | None = None,
) -> list[Task]:
    """``chain_sum`` tasks (reasoning-gym 0.1.25) posed for a stepwise solution.

    Args:
        split: "train", or "test" / "eval" (the held-out split: another generator seed).
        limit: number of tasks (default 100).
        seed: base seed (as in `trace_rl.envs.math_python.load_math_tasks`).
        config: chain_sum knobs (``min_terms``, ``max_terms``, ``min_digits``, ``max_digits``); missing keys
            take `DEFAULT_CONFIG`. ``min_terms`` must be at least 2.

    Raises:
        ValueError: unknown split, unknown config key, fewer than 2 terms, limit < 0.
    """
    cfg = {**DEFAULT_CONFIG, **(config or {})}
    unknown = set(cfg) - set(DEFAULT_CONFIG)
    if unknown:
        raise DataError(f"math_steps config: unknown keys {sorted(unknown)}; known: {sorted(DEFAULT_CONFIG)}")
    if int(cfg["min_terms"]) < 2 or int(cfg["max_terms"]) < int(cfg["min_terms"]):
        raise DataError(
            f"math_steps needs 2 <= min_terms <= max_terms, got {cfg['min_terms']}..{cfg['max_terms']}"
        )
    base = load_math_tasks(
        "test" if split == "eval" else split, limit=limit, seed=seed, generators={"chain_sum": cfg}
    )
    return [
        dataclasses.replace(
            t,
            id=t.id.replace("chain_sum", ENV_NAME, 1),
            env=ENV_NAME,
            prompt=f"{t.metadata['question']}\n\n{SYSTEM_HINT}",
        )
        for t in base
    ]


def fold_steps(expression: str) -> list[tuple[str, int]]:
    """The left fold of a ``+``/``-`` chain: ``[(code, printed value), ...]``, one entry per operation.

    ``"15 - 43 - 75"`` gives ``[("print(15 - 43)", -28), ("print(-28 - 75)", -103)]``.

    Raises:
        ValueError: the expression is not ``int (op int)+`` with op in ``+``/``-``.
    """
    tokens = expression.split()
    if len(tokens) < 3 or len(tokens) % 2 == 0 or any(op not in "+-" for op in tokens[1::2]):
        raise ValueError(f"not a chain of additions and subtractions: {expression!r}")
    try:
        acc = int(tokens[0])
        operands = [int(x) for x in tokens[2::2]]
    except ValueError as exc:
        raise ValueError(f"not a chain of integers: {expression!r}") from exc
    steps = []
    for op, x in zip(tokens[1::2], operands, strict=True):
        code = f"print({acc} {op} {x})"
        acc = acc + x if op == "+" else acc - x
        steps.append((code, acc))
    return steps


def steps_gold_trajectory(task: Task) -> list[str]:
    """Assistant turns of the stepwise gold solution: one python call per operation, then the answer."""
    _, entry = _entry(task)
    steps = fold_steps(str(entry["metadata"]["expression"]))
    if str(steps[-1][1]) != str(task.answer):  # the generator and the fold must agree
        raise ValueError(f"task {task.id}: fold gives {steps[-1][1]}, generator says {task.answer}")
    calls = [_tool_call_text("python", {"code": code}) for code, _ in steps]
    return [*calls, f"<answer>{task.answer}</answer>"]


class MathStepsEnv(MathPythonEnv):
    """`MathPythonEnv` under its own name (tasks, gold trajectories and presets differ; tool and reward do not).

    ``max_turns`` defaults to 8: a 6-term problem takes 6 turns, with two to spare.
    """

    name = ENV_NAME

    def __init__(self, *, max_turns: int = 8, **kwargs: Any) -> None:
        super().__init__(max_turns=max_turns, **kwargs)


__all__ = ["ENV_NAME", "MathStepsEnv", "fold_steps", "load_step_tasks", "steps_gold_trajectory"]
