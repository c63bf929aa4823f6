"""bfcl: BFCL v4 multi-turn function calling (base, long_context, miss_func, miss_param) from bfcl-eval's data.

Episode shape: the user turns are fixed text. ``reset`` returns the first user message. The assistant then
takes steps: a step with ``<tool_call>`` blocks executes them (observation role "tool"); a step with no tool
call (plain text or ``<answer>``) ends the current user turn, and the next fixed user message comes back as
that step's observation with ``info["role"] == "user"`` (for miss_func, the turn that restores held-out
functions brings BFCL's message "I have updated some more functions ..." and ``info["new_tools"]``, the
schemas to add to the tool list). After the last user turn the episode ends with the reward.

Reward (by default equal to bfcl-eval 2026.3.23's ``multi_turn_checker``, which is what its eval runner
scores multi-turn entries with): at the end of each user turn t, the ground-truth calls of turn t run on a
ground-truth copy of the APIs; if that turn has ground truth, the model must have made calls in it, every
public attribute of every API instance must equal the ground-truth instance's (state check), and every
ground-truth execution result of turn t must appear among the model's execution results of turns 0..t
(response check, as a multiset). A turn whose ground truth is empty (a missing function or parameter) is not
checked; its calls still run. ``strict_irrelevance=True`` adds bfcl-eval's ``multi_turn_irrelevance_checker``
rule, which its runner imports but does not apply: such a turn must contain no call. Reward 1 when every turn
passes, else 0; by default the episode stops at the first failing turn (``stop_on_failure``).
``trace_rl.envs.bfcl_parity`` runs the official checker on the same calls (tests and benchmarks/bfcl_parity.py).

Differences from bfcl-eval's executor, on purpose: API classes are instantiated per episode from a deep copy
of the task's initial config (never module globals), calls are dispatched by name to the public methods the
task's function docs declare (never eval; ground-truth strings are parsed with ``ast``); other names return
an error. As in bfcl-eval, a miss_func held-out function can be called before it is announced (the data's
ground truth does so in multi_turn_miss_func_49).
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from trace_rl.envs.base import (
    FORMAT_HELP,
    MAX_CALLS_PER_TURN,
    StepResult,
    ToolCall,
    format_tool_results,
    parse_turn,
)
from trace_rl.errors import DataError
from trace_rl.types import Task

ENV_NAME = "bfcl"
SUBSETS = ("base", "long_context", "miss_func", "miss_param")
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
_BACKEND = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
STATELESS_CLASSES = ("MathAPI",)
_TYPE_MAP = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "int": "integer",
    "bool": "boolean",
    "str": "string",
}


# ---- data ----------------------------------------------------------------------------------------------


def _data_file(*parts: str) -> Any:
    return resources.files("bfcl_eval").joinpath("data", *parts)


def _read_jsonl(*parts: str) -> list[dict[str, Any]]:
    text = _data_file(*parts).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _openai_schema(node: Any) -> Any:
    """BFCL's pseudo-JSON-schema types (dict, float, tuple, any) -> JSON Schema, recursively."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "type" and isinstance(v, str):
                if v == "any":
                    continue
                out[k] = _TYPE_MAP.get(v, v)
            else:
                out[k] = _openai_schema(v)
        return out
    if isinstance(node, list):
        return [_openai_schema(v) for v in node]
    return node


def _tool(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc.get("description", ""),
            "parameters": _openai_schema(doc.get("parameters", {"type": "dict", "properties": {}})),
        },
    }


def _func_docs(class_name: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in _data_file("multi_turn_func_doc", FUNC_DOC_FILES[class_name]).read_text().splitlines()
        if line.strip()
    ]


def _split_indices(n: int, split: str, seed: int) -> list[int]:
    """Scenario indices of an 80/20 split (shuffled with ``seed``); the same scenario index is in the same
    split in every subset (the four subsets share scenarios, so a per-subset split would leak)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    cut = round(0.8 * n)
    if split == "train":
        return order[:cut]
    if split == "test":
        return order[cut:]
    if split == "all":
        return order
    raise DataError(f"bfcl split must be 'train', 'test' or 'all', got {split!r}")


def load_bfcl_tasks(
    split: str = "train", limit: int | None = None, seed: int = 0, *, subsets: tuple[str, ...] = SUBSETS
) -> list[Task]:
    """BFCL v4 multi-turn tasks, interleaved over ``subsets`` scenario by scenario.

    Task.prompt is the first user message; Task.tools the functions available at the start (OpenAI format);
    metadata holds the initial config, the fixed user turns, the ground-truth call strings per turn, and for
    miss_func the functions added at later turns (``added_tools``: turn index -> schemas).

    Raises:
        ValueError: unknown split or subset.
    """
    bad = set(subsets) - set(SUBSETS)
    if bad:
        raise DataError(f"unknown bfcl subsets {sorted(bad)}; expected a subset of {SUBSETS}")
    per_subset: dict[str, dict[int, tuple[dict[str, Any], list[list[str]]]]] = {}
    n = 0
    for sub in subsets:
        entries = _read_jsonl(f"BFCL_v4_multi_turn_{sub}.json")
        answers = {
            a["id"]: a["ground_truth"]
            for a in _read_jsonl("possible_answer", f"BFCL_v4_multi_turn_{sub}.json")
        }
        per_subset[sub] = {int(e["id"].rsplit("_", 1)[1]): (e, answers[e["id"]]) for e in entries}
        n = max(n, max(per_subset[sub]) + 1)
    tasks: list[Task] = []
    for idx in _split_indices(n, split, seed):
        for sub in subsets:
            if idx not in per_subset[sub]:
                continue
            entry, truth = per_subset[sub][idx]
            tasks.append(_make_task(entry, truth, sub))
            if limit is not None and len(tasks) >= limit:
                return tasks
    return tasks


def _make_task(entry: dict[str, Any], truth: list[list[str]], subset: str) -> Task:
    docs = [d for cls in entry["involved_classes"] for d in _func_docs(cls)]
    missed = {str(k): list(v) for k, v in entry.get("missed_function", {}).items()}
    held_out = {name for names in missed.values() for name in names}
    turns = [[m["content"] for m in turn if m.get("role") == "user"] for turn in entry["question"]]
    return Task(
        id=entry["id"],
        env=ENV_NAME,
        prompt="\n".join(turns[0]),
        answer=None,
        tools=tuple(_tool(d) for d in docs if d["name"] not in held_out),
        metadata={
            "subset": subset,
            "initial_config": entry["initial_config"],
            "involved_classes": list(entry["involved_classes"]),
            "user_turns": turns,
            "ground_truth": truth,
            "missed_function": missed,
            "added_tools": {t: [_tool(d) for d in docs if d["name"] in names] for t, names in missed.items()},
            "long_context": subset == "long_context",
        },
    )


# ---- execution -----------------------------------------------------------------------------------------


def make_instances(task: Task) -> dict[str, Any]:
    """Fresh API instances for one episode, loaded from a deep copy of the task's initial config."""
    m = task.metadata
    config: dict[str, Any] = m["initial_config"]  # type: ignore[assignment]
    out: dict[str, Any] = {}
    for cls_name in m["involved_classes"]:  # type: ignore[attr-defined]
        module = importlib.import_module(f"{_BACKEND}.{CLASS_MODULES[cls_name]}")
        inst = getattr(module, cls_name)()
        if cls_name not in STATELESS_CLASSES:
            inst._load_scenario(copy.deepcopy(config.get(cls_name, {})), long_context=bool(m["long_context"]))
        out[cls_name] = inst
    return out


def _find_method(instances: dict[str, Any], name: str) -> Any:
    for inst in instances.values():
        if not name.startswith("_") and callable(getattr(type(inst), name, None)):
            return getattr(inst, name)
    return None


def _result_text(value: Any) -> str:
    """bfcl-eval's conversion of a return value to the string the checker compares."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def execute_call(instances: dict[str, Any], name: str, arguments: dict[str, Any], allowed: set[str]) -> str:
    """Run one call on this episode's instances; errors become bfcl-eval's "Error during execution: ..."."""
    if name not in allowed:
        return f"Error during execution: function {name!r} is not available"
    method = _find_method(instances, name)
    if method is None:
        return f"Error during execution: no method {name!r}"
    try:
        return _result_text(method(**arguments))
    except Exception as exc:  # the API code's own errors are observations, as in bfcl-eval
        return f"Error during execution: {exc}"


def parse_call_string(call: str) -> tuple[str, list[Any], dict[str, Any]]:
    """``"mv(source='a', destination='b')"`` -> ("mv", [], {...}) with ``ast`` (literal arguments only).

    Raises:
        ValueError: not a single call of a plain name with literal arguments.
    """
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a call expression: {call!r}") from exc
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {call!r}")
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
    except ValueError as exc:
        raise ValueError(f"non-literal argument in {call!r}") from exc
    return node.func.id, args, kwargs


def _bind(instances: dict[str, Any], name: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    method = _find_method(instances, name)
    if method is None or not args:
        return dict(kwargs)
    bound = inspect.signature(method).bind_partial(*args, **kwargs)
    return dict(bound.arguments)


# ---- env -----------------------------------------------------------------------------------------------


@dataclass
class BfclState:
    """Everything a BFCL save point holds (deep-copied by snapshot)."""

    task: Task
    instances: dict[str, Any]
    truth_instances: dict[str, Any]
    allowed: set[str]
    turn_index: int = 0  # index of the current user turn
    steps_in_turn: int = 0
    total_steps: int = 0
    turn_calls: list[list[str]] = field(default_factory=list)  # per finished turn: call names made
    current_calls: list[str] = field(default_factory=list)
    model_results: list[str] = field(default_factory=list)  # all execution results so far, in order
    failure: str | None = None
    done: bool = False


class BfclEnv:
    """BFCL v4 multi-turn environment; see the module docstring for the episode and reward."""

    name = ENV_NAME

    def __init__(
        self,
        *,
        max_steps_per_turn: int = 20,
        max_turns: int = 100,
        stop_on_failure: bool = True,
        strict_irrelevance: bool = False,
    ) -> None:
        """Args: ``max_steps_per_turn`` (steps with calls allowed per user turn, BFCL's 20: one more ends the
        episode with 0, as bfcl-eval's forced termination), ``max_turns`` (assistant steps per
        episode), ``stop_on_failure`` (end the episode at the first failing user turn), ``strict_irrelevance``
        (a user turn with empty ground truth fails when it contains a call; off in bfcl-eval's scoring).

        Raises:
            ValueError: a limit below 1.
        """
        if max_steps_per_turn < 1 or max_turns < 1:
            raise ValueError("max_steps_per_turn and max_turns must be >= 1")
        self.max_steps_per_turn = max_steps_per_turn
        self.max_turns = max_turns
        self.stop_on_failure = stop_on_failure
        self.strict_irrelevance = strict_irrelevance
        self._state: BfclState | None = None

    @property
    def state(self) -> BfclState:
        if self._state is None:
            raise ValueError("bfcl: call reset(task) or restore(state) before step()")
        return self._state

    def reset(self, task: Task) -> str:
        if task.env != self.name:
            raise ValueError(f"task {task.id!r} belongs to env {task.env!r}, not {self.name!r}")
        # Callable: every documented function of the involved classes, held-out ones included (as in
        # bfcl-eval, whose data has ground truth calling a held-out function before it is restored).
        allowed = {str(t["function"]["name"]) for t in task.tools}  # type: ignore[index]
        for tools in task.metadata["added_tools"].values():  # type: ignore[attr-defined]
            allowed |= {str(t["function"]["name"]) for t in tools}
        self._state = BfclState(
            task=task, instances=make_instances(task), truth_instances=make_instances(task), allowed=allowed
        )
        return task.prompt

    def snapshot(self) -> object:
        return copy.deepcopy(self.state)

    def restore(self, state: object) -> None:
        if not isinstance(state, BfclState):
            raise ValueError("bfcl: restore() needs a snapshot taken from a bfcl env")
        self._state = copy.deepcopy(state)

    def step(self, assistant_text: str) -> StepResult:
        st = self.state
        if st.done:
            raise ValueError("bfcl: step() after the episode ended; call reset()")
        st.total_steps += 1
        st.steps_in_turn += 1
        parsed = parse_turn(assistant_text)
        info: dict[str, Any] = {"turn": st.total_steps, "user_turn": st.turn_index}
        if parsed.internal_error is not None:
            info["parser_exception"] = parsed.internal_error
        if parsed.calls and parsed.answer is None:
            results = []
            for call in parsed.calls:
                content = execute_call(st.instances, call.name, call.arguments, st.allowed)
                st.current_calls.append(call.name)
                st.model_results.append(content)
                results.append((call.name, content))
            info["role"] = "tool"
            info["tool_results"] = [{"name": n, "content": c} for n, c in results]
            observation = format_tool_results(results)
            if parsed.errors:
                info["error"] = "; ".join(parsed.errors)
                observation += "\nError: " + info["error"]
            return self._limit_check(observation, info)
        if parsed.errors and parsed.answer is None:
            info["role"] = "user"
            info["error"] = "; ".join(parsed.errors)
            return self._limit_check(f"Error: {info['error']}. {FORMAT_HELP}", info)
        # No tool call (or an answer, which wins over calls): this user turn's response is complete.
        if parsed.calls:
            info["ignored_calls"] = [c.name for c in parsed.calls]
        return self._end_user_turn(info)

    def _limit_check(self, observation: str, info: dict[str, Any]) -> StepResult:
        st = self.state
        # BFCL's MAXIMUM_STEP_LIMIT: 20 steps with calls are allowed, the 21st forces the end (score 0)
        if st.steps_in_turn > self.max_steps_per_turn or st.total_steps >= self.max_turns:
            st.done = True
            info["truncated"] = True
            st.failure = st.failure or "step limit reached"
            info["failure"] = st.failure
            return StepResult(observation, 0.0, True, info)
        return StepResult(observation, 0.0, False, info)

    def _end_user_turn(self, info: dict[str, Any]) -> StepResult:
        st = self.state
        m = st.task.metadata
        truth: list[list[str]] = m["ground_truth"]  # type: ignore[assignment]
        t = st.turn_index
        if st.failure is None:
            st.failure = self._check_turn(truth[t])
        st.turn_calls.append(st.current_calls)
        st.current_calls = []
        st.steps_in_turn = 0
        st.turn_index += 1
        info["turn_passed"] = st.failure is None
        turns: list[list[str]] = m["user_turns"]  # type: ignore[assignment]
        if st.turn_index >= len(turns) or (st.failure is not None and self.stop_on_failure):
            st.done = True
            info["role"] = "user"
            if st.failure is not None:
                info["failure"] = st.failure
            return StepResult("", 1.0 if st.failure is None else 0.0, True, info)
        key = str(st.turn_index)
        added = m["added_tools"].get(key, [])  # type: ignore[attr-defined]
        if added:
            info["new_tools"] = added
        message = "\n".join(turns[st.turn_index]) or ADDED_FUNCTIONS_PROMPT
        info["role"] = "user"
        return StepResult(message, 0.0, False, info)

    def _check_turn(self, truth_calls: list[str]) -> str | None:
        """Run the turn's ground truth and compare (bfcl-eval multi_turn_checker semantics); None = pass."""
        st = self.state
        truth_results = []
        for call in truth_calls:
            name, args, kwargs = parse_call_string(call)
            arguments = _bind(st.truth_instances, name, args, kwargs)
            truth_results.append(execute_call(st.truth_instances, name, arguments, {name}))
        if not truth_calls:
            if self.strict_irrelevance and st.current_calls:
                return f"turn {st.turn_index}: calls made where none should be"
            return None
        if not st.current_calls:
            return f"turn {st.turn_index}: no function call made"
        for cls_name, truth_inst in st.truth_instances.items():
            model_inst = st.instances[cls_name]
            for attr, value in vars(truth_inst).items():
                if not attr.startswith("_") and getattr(model_inst, attr, object()) != value:
                    return f"turn {st.turn_index}: state of {cls_name}.{attr} differs from the ground truth"
        pool = list(st.model_results)
        for res in truth_results:
            try:
                pool.remove(res)
            except ValueError:
                return f"turn {st.turn_index}: missing ground-truth result {res[:200]!r}"
        return None


def bfcl_gold_trajectory(task: Task) -> list[str]:
    """Per user turn: the ground-truth calls as tool-call steps (at most MAX_CALLS_PER_TURN per step), then a
    closing text step that ends the turn (for an empty ground truth, only the closing step)."""
    instances = make_instances(task)
    turns: list[str] = []
    for truth_calls in task.metadata["ground_truth"]:  # type: ignore[attr-defined]
        blocks = []
        for call in truth_calls:
            name, args, kwargs = parse_call_string(call)
            arguments = _bind(instances, name, args, kwargs)
            blocks.append(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")
        for i in range(0, len(blocks), MAX_CALLS_PER_TURN):
            turns.append("\n".join(blocks[i : i + MAX_CALLS_PER_TURN]))
        turns.append(
            "Done." if truth_calls else "I cannot do this: a required function or parameter is missing."
        )
    return turns


__all__ = [
    "BfclEnv",
    "ToolCall",
    "bfcl_gold_trajectory",
    "execute_call",
    "load_bfcl_tasks",
    "make_instances",
    "parse_call_string",
]
