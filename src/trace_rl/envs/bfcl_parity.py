"""Reward parity of the bfcl env with bfcl-eval's official multi-turn checker (issue 16).

A *call trajectory* is, per user turn, per assistant step, the tool calls of that step:
``list[list[list[ToolCall]]]`` (one entry per user turn of the task; a step holds at least one call).

- `env_reward` plays it through `BfclEnv` (each step as ``<tool_call>`` blocks, at most
  ``MAX_CALLS_PER_TURN`` per assistant turn, each user turn closed by a text step) and returns the reward.
- `official_reward` turns every call into BFCL's call string (``name(key=literal, ...)``) and scores the
  trajectory with bfcl-eval's own ``multi_turn_checker`` (the pinned 2026.3.23, the function its eval runner
  uses for multi-turn entries), in fresh API instances that are dropped afterwards.
- `gold_calls` is the ground truth as a call trajectory; `perturbed_trajectories` derives labelled variants
  from it (dropped, duplicated, reordered, moved and altered calls; calls in turns whose ground truth is
  empty), the cases tests/integration/test_bfcl_parity.py and benchmarks/bfcl_parity.py compare.

bfcl-eval executes the call strings with ``eval``; `official_reward` therefore only builds strings whose name is
one of the task's API methods (the functions documented for its ``involved_classes``, held-out ones included:
never a bfcl-eval helper such as ``execute_multi_turn_func_call``, never a builtin) and whose arguments'
``repr`` reads back as the same literal (``ast.literal_eval``), and raises ValueError for anything else.
"""

from __future__ import annotations

import ast
import builtins
import copy
import itertools
import json
import keyword
import re
from collections.abc import Iterator
from typing import Any

from trace_rl.envs.base import MAX_CALLS_PER_TURN, ToolCall
from trace_rl.envs.bfcl import BfclEnv, _bind, _func_docs, make_instances, parse_call_string
from trace_rl.types import Task

CallTrajectory = list[list[list[ToolCall]]]
"""Per user turn, per assistant step, the calls of that step."""

_run_ids = itertools.count()


def gold_calls(task: Task) -> CallTrajectory:
    """The task's ground truth as a call trajectory: one step per user turn holding all its calls (none for a
    turn with empty ground truth); positional arguments are bound to their parameter names."""
    instances = make_instances(task)
    out: CallTrajectory = []
    for truth in task.metadata["ground_truth"]:  # type: ignore[attr-defined]
        calls = []
        for text in truth:
            name, args, kwargs = parse_call_string(text)
            calls.append(ToolCall(name, _bind(instances, name, args, kwargs)))
        out.append([calls] if calls else [])
    return out


def env_reward(task: Task, turns: CallTrajectory, **env_kwargs: Any) -> float:
    """Reward of ``turns`` played through ``BfclEnv(**env_kwargs)`` (0.0 when it ends before the last turn).

    Raises:
        ValueError: ``turns`` does not have one entry per user turn of the task.
    """
    _check_turns(task, turns)
    env = BfclEnv(**env_kwargs)
    env.reset(task)
    for steps in turns:
        for step in steps:
            for i in range(0, len(step), MAX_CALLS_PER_TURN):  # a longer step is several assistant turns
                text = "\n".join(
                    f"<tool_call>{json.dumps({'name': c.name, 'arguments': c.arguments})}</tool_call>"
                    for c in step[i : i + MAX_CALLS_PER_TURN]
                )
                result = env.step(text)
                if result.done:
                    return result.reward
        result = env.step("Done.")
        if result.done:
            return result.reward
    return 0.0


def official_reward(task: Task, turns: CallTrajectory) -> float:
    """Reward bfcl-eval's ``multi_turn_checker`` gives ``turns`` (1.0 valid, else 0.0).

    As in bfcl-eval's runner, a user turn with more than ``MAXIMUM_STEP_LIMIT`` (20) steps of calls is a
    forced termination during inference and scores 0 before the checker runs.

    Raises:
        ValueError: wrong number of turns, or a call that cannot be written as a safe BFCL call string.
    """
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    _check_turns(task, turns)
    if any(len([s for s in steps if s]) > MAXIMUM_STEP_LIMIT for steps in turns):
        return 0.0
    methods = api_methods(task)
    decoded = [[[_call_string(c, methods) for c in step] for step in steps if step] for steps in turns]
    m = task.metadata
    entry = {
        "id": task.id,
        "initial_config": copy.deepcopy(m["initial_config"]),
        "involved_classes": list(m["involved_classes"]),  # type: ignore[call-overload]
    }
    model_name = f"trace_rl_parity_{next(_run_ids)}"
    category = task.id.rsplit("_", 1)[0]
    try:
        result = multi_turn_checker(decoded, m["ground_truth"], entry, category, model_name)
    finally:  # bfcl-eval caches API instances in its module globals, keyed by the model name
        prefix = re.sub(r"[-./:]", "_", model_name) + "_"
        for key in [k for k in vars(multi_turn_utils) if k.startswith(prefix)]:
            delattr(multi_turn_utils, key)
    return 1.0 if result.get("valid") else 0.0


def perturbed_trajectories(gold: CallTrajectory) -> Iterator[tuple[str, CallTrajectory]]:
    """Labelled variants of a gold call trajectory (the gold itself first, label "gold").

    Labels: ``drop_last`` (a turn's last call removed), ``duplicate`` (a turn's last call made twice),
    ``swap`` (a turn's first two calls swapped), ``one_per_step`` (a turn's calls one step each),
    ``move_to_previous`` (a turn's first call made one turn early), ``alter_string`` (a string argument of a
    turn's first call changed), ``call_in_empty_turn`` (a turn with empty ground truth gets the previous
    non-empty turn's last call again), ``early_in_empty_turn`` (the next turn's first call made in the empty
    turn instead). At most one variant per label and turn.
    """
    yield "gold", gold
    for t, steps in enumerate(gold):
        calls = [c for step in steps for c in step]
        if calls:
            yield "drop_last", _with_turn(gold, t, calls[:-1])
            yield "duplicate", _with_turn(gold, t, [*calls, calls[-1]])
            if len(calls) >= 2:
                yield "swap", _with_turn(gold, t, [calls[1], calls[0], *calls[2:]])
                yield "one_per_step", _replace(gold, t, [[c] for c in calls])
            if t > 0:
                before = [c for step in gold[t - 1] for c in step]
                moved = _with_turn(gold, t - 1, [*before, calls[0]])
                yield "move_to_previous", _with_turn(moved, t, calls[1:])
            altered = _alter_string(calls[0])
            if altered is not None:
                yield "alter_string", _with_turn(gold, t, [altered, *calls[1:]])
            continue
        previous = [c for s in gold[:t] for step in s for c in step]
        if previous:
            yield "call_in_empty_turn", _with_turn(gold, t, [previous[-1]])
        later = next(([c for step in s for c in step] for s in gold[t + 1 :] if s), None)
        if later:
            early = _with_turn(gold, t, [later[0]])
            t_next = next(i for i in range(t + 1, len(gold)) if gold[i])
            yield "early_in_empty_turn", _with_turn(early, t_next, later[1:])


def _check_turns(task: Task, turns: CallTrajectory) -> None:
    expected = len(task.metadata["ground_truth"])  # type: ignore[arg-type]
    if len(turns) != expected:
        raise ValueError(f"{task.id}: a call trajectory needs {expected} user turns, got {len(turns)}")


def _with_turn(turns: CallTrajectory, t: int, calls: list[ToolCall]) -> CallTrajectory:
    return _replace(turns, t, [calls] if calls else [])


def _replace(turns: CallTrajectory, t: int, steps: list[list[ToolCall]]) -> CallTrajectory:
    return [steps if i == t else s for i, s in enumerate(turns)]


def _alter_string(call: ToolCall) -> ToolCall | None:
    for key, value in call.arguments.items():
        if isinstance(value, str):
            return ToolCall(call.name, {**call.arguments, key: value + "_x"})
    return None


def api_methods(task: Task) -> frozenset[str]:
    """Names of the task's API methods: every function documented for its ``involved_classes`` (including the
    ones held out until a later turn)."""
    classes: list[str] = list(task.metadata["involved_classes"])  # type: ignore[call-overload]
    return frozenset(str(d["name"]) for cls in classes for d in _func_docs(cls))


def _call_string(call: ToolCall, methods: frozenset[str]) -> str:
    name = call.name
    if name not in methods or not name.isidentifier() or keyword.iskeyword(name) or hasattr(builtins, name):
        raise ValueError(f"{name!r} is not one of the task's API methods: it cannot be a BFCL call string")
    parts = []
    for key, value in call.arguments.items():
        text = repr(value)
        if not key.isidentifier() or keyword.iskeyword(key) or _literal(text) != value:
            raise ValueError(f"argument {key!r} of {name!r} cannot be written as a Python literal")
        parts.append(f"{key}={text}")
    return f"{name}({', '.join(parts)})"


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return object()


__all__ = [
    "CallTrajectory",
    "api_methods",
    "env_reward",
    "gold_calls",
    "official_reward",
    "perturbed_trajectories",
]
