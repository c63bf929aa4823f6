"""The Env protocol (DESIGN.md section 4), the ReAct turn format and its tolerant parser.

Turn format (Hermes / Qwen convention):

    <think>optional reasoning, ignored by the parser</think>
    some thought text
    <tool_call>{"name": "python", "arguments": {"code": "print(2+2)"}}</tool_call>

or a final answer ``<answer>4</answer>``.

Parsing decisions for the shapes seen in the wild (each on purpose):
- several ``<tool_call>`` blocks in one turn: all run, in order (up to ``MAX_CALLS_PER_TURN``, more is an error);
- several JSON objects back to back (whitespace between them) inside one block: each is a call, run in order,
  and each counts as a block against ``MAX_CALLS_PER_TURN``; any other text between a decoded object and
  its closing tag is an error (reported in the observation; the calls decoded before it still run);
- calls inside code fences and text after the call: accepted (the tags are explicit);
- a closing tag inside a string argument: the JSON object is parsed with ``raw_decode`` from its opening
  brace, so a ``</tool_call>`` inside a string does not cut it;
- a missing closing tag (a sampler stopped at ``</tool_call>``): accepted when the JSON object is complete;
- single-quoted pseudo-JSON (a Python dict literal): accepted through ``ast.literal_eval`` (never eval);
- ``parameters`` instead of ``arguments``: accepted as an alias; both present is an error;
- ``arguments`` given as a JSON string: decoded; an argument value that cannot be decoded is an error, never
  silently emptied; no ``arguments`` key at all means a call without arguments;
- ``<answer>`` together with tool calls: the answer wins and ends the episode; the calls are not run
  (reported in ``info["ignored_calls"]``).
Anything else malformed becomes an error observation: the turn counts, nothing raises.

Work caps (so a hostile or degenerate turn costs time linear in its length, never quadratic):
- ``MAX_CALLS_PER_TURN`` ``<tool_call>`` blocks are parsed per turn, well-formed or not; a further opening tag
  makes the whole turn's calls an error ("too many tool calls") and nothing is run;
- ``MAX_CALL_CHARS`` (64 Ki) characters of one call, counted from its opening brace, go to the JSON decoder:
  a call whose object does not end within them is an error;
- the Python-literal fallback sees only the first ``MAX_LITERAL_CHARS`` (8 Ki) characters (so a single-quoted
  call longer than that is an error) and tries the text up to at most ``MAX_CLOSE_TAGS_TRIED`` closing tags
  (then the whole window, for a call without a closing tag).
So one turn costs O(len(text) + MAX_CALLS_PER_TURN * (MAX_CALL_CHARS + (MAX_CLOSE_TAGS_TRIED + 1) *
MAX_LITERAL_CHARS)); benchmarks/parse_turn.py measures the worst shapes.
Any exception that still escapes the parser (a bug) is caught in `parse_turn`, logged with its traceback, and
reported as an error with ``ParsedTurn.internal_error`` set to the exception type, which the envs copy into
``info["parser_exception"]``: the turn becomes an error observation instead of crashing the episode.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trace_rl.types import Task

MAX_CALLS_PER_TURN = 8
"""At most this many ``<tool_call>`` blocks per turn; more is an error and no call of the turn runs."""
MAX_CALL_CHARS = 65_536
"""Characters of one tool call (from its opening brace) the JSON decoder looks at."""
MAX_LITERAL_CHARS = 8_192
"""Characters of one tool call the (slower, pure-Python) Python-literal fallback looks at."""
MAX_CLOSE_TAGS_TRIED = 4
"""Closing tags tried per call by the Python-literal fallback."""

_log = logging.getLogger(__name__)

_THINK_RE = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_ANSWER_RE = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
_CALL_OPEN = "<tool_call>"
_CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class StepResult:
    """What the environment returns for one assistant turn.

    Attributes:
        observation: text to append as the next message ("" when the episode ended without one).
        reward: terminal reward on the final step (binary in all three environments), 0.0 before it.
        done: True when the episode is over (answer given, last user turn finished, or max turns hit).
        info: JSON-serialisable details. Always holds ``"role"``: "tool" when the observation answers tool
            calls (``info["tool_results"]`` lists ``{"name", "content"}`` per call), "user" when it is a new
            user message (a BFCL fixed user turn, or format feedback after malformed output); plus
            ``"turn"`` (1-based count of assistant turns so far) and ``"error"`` when the turn was malformed;
            ``"parser_exception"`` (an exception type name) when the parser itself failed (a bug, logged).
    """

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """An agent environment with save points at every turn boundary.

    ``reset(task)`` returns the first observation: the user prompt text (``task.prompt``); the task's tool
    schemas are in ``task.tools``. ``step(text)`` consumes one assistant turn. ``snapshot()`` returns an opaque
    state that ``restore(state)`` loads, on this instance or on a fresh one made by ``make_env`` with the
    same name and arguments; after restore, the env continues exactly as it would have from that point.
    Snapshots are independent deep copies: stepping after a snapshot never changes it.
    """

    name: str

    def reset(self, task: Task) -> str: ...

    def step(self, assistant_text: str) -> StepResult: ...

    def snapshot(self) -> object: ...

    def restore(self, state: object) -> None: ...


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: ``name`` and JSON-like ``arguments``."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedTurn:
    """Result of parsing one assistant turn.

    Attributes:
        calls: tool calls in order of appearance.
        answer: text inside ``<answer>`` (stripped), or None.
        errors: one message per malformed call or block; the env turns these into an error observation.
        internal_error: see below.
    """

    calls: tuple[ToolCall, ...]
    answer: str | None
    errors: tuple[str, ...]
    internal_error: str | None = None
    """Type name of an unexpected exception inside the parser (a bug, logged), else None."""


def _decode_object(text: str) -> tuple[dict[str, Any] | None, int, str | None]:
    """Decode the JSON (or Python-literal) object starting at ``text[0] == '{'``.

    Only the first ``MAX_CALL_CHARS`` characters are looked at (the caller passes one more, so that a longer
    call is recognised as cut). Returns (object or None, characters consumed,
    error message or None); never raises for any text.
    """
    window = text[:MAX_CALL_CHARS]
    truncated = len(text) > MAX_CALL_CHARS
    obj: Any = None
    end = 0
    try:
        obj, end = json.JSONDecoder().raw_decode(window)
    except (ValueError, RecursionError):  # JSONDecodeError, integer digit limit, nesting depth
        obj = None
    if obj is None:
        short = window[:MAX_LITERAL_CHARS]
        obj, end = _literal_object(short, allow_unclosed=len(short) == len(text))
        if obj is None:
            if truncated and _CALL_CLOSE not in window:
                return None, 0, f"tool call is not valid JSON within its first {MAX_CALL_CHARS} characters"
            return None, 0, "tool call is not valid JSON"
    if not isinstance(obj, dict):
        return None, end, "tool call must be a JSON object with 'name' and 'arguments'"
    return obj, end, None


_LITERAL_ERRORS = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, OverflowError)


def _literal_object(window: str, *, allow_unclosed: bool) -> tuple[Any, int]:
    """Python-literal fallback: ``ast.literal_eval`` (never eval) of the text up to each of the first
    ``MAX_CLOSE_TAGS_TRIED`` closing tags, shortest first; then, when allowed, of the whole window (a call
    whose closing tag is missing). Returns (object, characters consumed) or (None, 0)."""
    pos = 0
    for _ in range(MAX_CLOSE_TAGS_TRIED):
        close = window.find(_CALL_CLOSE, pos)
        if close < 0:
            break
        try:
            return ast.literal_eval(window[:close].strip()), close
        except _LITERAL_ERRORS:  # TypeError: unhashable dict key such as {[1]: 2}
            pos = close + len(_CALL_CLOSE)
    if allow_unclosed:
        try:
            return ast.literal_eval(window.strip()), len(window)
        except _LITERAL_ERRORS:
            pass
    return None, 0


def _to_call(obj: dict[str, Any]) -> tuple[ToolCall | None, str | None]:
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, "tool call has no 'name' string"
    if "arguments" in obj and "parameters" in obj:
        return None, f"tool call {name!r} has both 'arguments' and 'parameters'"
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):  # JSONDecodeError, integer digit limit, nesting depth
            return None, f"arguments of {name!r} are a string that is not valid JSON"
    if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
        return None, f"arguments of {name!r} must be an object with string keys"
    return ToolCall(name=name.strip(), arguments=args), None


def parse_turn(text: str) -> ParsedTurn:
    """Parse one assistant turn into tool calls, an answer and errors (never raises, for any input).

    An exception escaping the parser proper is a bug: it is logged with its traceback and returned as a
    ParsedTurn with no calls, no answer, one error, and ``internal_error`` set to the exception's type name.
    """
    try:
        return _parse_turn(text)
    except Exception as exc:  # last line of defence: model output must never crash an episode
        _log.exception("parse_turn failed on a %d-character turn", len(text) if isinstance(text, str) else -1)
        kind = type(exc).__name__
        return ParsedTurn((), None, (f"the turn could not be parsed (internal {kind})",), internal_error=kind)


def _parse_turn(text: str) -> ParsedTurn:
    if not isinstance(text, str):
        return ParsedTurn((), None, (f"assistant turn must be text, got {type(text).__name__}",))
    visible = _THINK_RE.sub("", text)
    answer_match = _ANSWER_RE.search(visible)
    answer = answer_match.group(1).strip() if answer_match else None
    calls: list[ToolCall] = []
    errors: list[str] = []
    pos = 0
    blocks = 0
    glued = False  # the next object starts right at `pos`, inside the block of the previous one
    while True:
        if glued:
            body_start = pos
        else:
            start = visible.find(_CALL_OPEN, pos)
            if start < 0:
                break
            body_start = start + len(_CALL_OPEN)
        if blocks == MAX_CALLS_PER_TURN:
            errors.append(f"too many tool calls in one turn (more than {MAX_CALLS_PER_TURN})")
            return ParsedTurn((), answer, tuple(errors))
        blocks += 1
        glued = False
        brace = visible.find("{", body_start)
        close = visible.find(_CALL_CLOSE, body_start)
        if brace < 0 or (close >= 0 and visible[body_start:brace].strip()):
            errors.append("tool call body must be a JSON object")
            pos = close + len(_CALL_CLOSE) if close >= 0 else len(visible)
            continue
        obj, consumed, err = _decode_object(visible[brace : brace + MAX_CALL_CHARS + 1])
        if obj is None:
            errors.append(err or "malformed tool call")
            pos = close + len(_CALL_CLOSE) if close >= 0 else len(visible)
            continue
        call, err = _to_call(obj)
        if call is None:
            errors.append(err or "malformed tool call")
        else:
            calls.append(call)
        after = brace + consumed
        rest = visible[after:]
        stripped = rest.lstrip()
        pos = after + (len(rest) - len(stripped))
        if stripped.startswith(_CALL_CLOSE):
            pos += len(_CALL_CLOSE)
        elif stripped.startswith("{"):
            glued = True  # objects back to back in one block: each is a call (and a block against the cap)
        else:
            close = visible.find(_CALL_CLOSE, pos)
            reopen = visible.find(_CALL_OPEN, pos)
            if close >= 0 and (reopen < 0 or close < reopen):  # stray text before this block's closing tag
                errors.append(
                    f"unexpected text after a tool call, before </tool_call>: {visible[pos:close][:40]!r}"
                )
                pos = close + len(_CALL_CLOSE)
    return ParsedTurn(tuple(calls), answer, tuple(errors))


FORMAT_HELP = (
    'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call> '
    "or give the final answer as <answer>...</answer>."
)


def format_tool_results(results: list[tuple[str, str]]) -> str:
    """One observation string for the results of a turn's calls: the bare result for a single call, else
    one ``[name] result`` block per call, in call order."""
    if len(results) == 1:
        return results[0][1]
    return "\n".join(f"[{name}] {content}" for name, content in results)


@dataclass
class EpisodeState:
    """Mutable state of one episode of an answer-style env (everything a save point must hold).

    Attributes:
        task: the task being played.
        turn: assistant turns taken so far.
        done: whether the episode ended.
        tool_calls: number of tool calls executed so far.
        extra: env-specific JSON-like state (empty for stateless tools).
    """

    task: Task
    turn: int = 0
    done: bool = False
    tool_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class AnswerEnv:
    """Shared loop for envs whose episode ends with ``<answer>`` (math_python, multihop_qa).

    Subclasses set ``name`` and implement ``call_tool(state, call) -> str`` (raise ValueError for bad
    arguments: it becomes an error result) and ``score(task, answer) -> (reward, info)``. Tools are stateless
    or keep their state in ``state.extra``, so a snapshot is a deep copy of the EpisodeState.
    """

    name = "answer_env"

    def __init__(self, *, max_turns: int = 8) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._state: EpisodeState | None = None

    # -- hooks -------------------------------------------------------------------------------------------
    def tool_names(self, task: Task) -> set[str]:
        return {str(t["function"]["name"]) for t in task.tools if isinstance(t.get("function"), dict)}  # type: ignore[index]

    def call_tool(self, state: EpisodeState, call: ToolCall) -> str:
        raise NotImplementedError

    def score(self, task: Task, answer: str) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError

    # -- protocol ----------------------------------------------------------------------------------------
    @property
    def state(self) -> EpisodeState:
        if self._state is None:
            raise ValueError(f"{self.name}: call reset(task) or restore(state) before step()")
        return self._state

    def reset(self, task: Task) -> str:
        if task.env != self.name:
            raise ValueError(f"task {task.id!r} belongs to env {task.env!r}, not {self.name!r}")
        self._state = EpisodeState(task=task)
        return task.prompt

    def snapshot(self) -> object:
        import copy

        return copy.deepcopy(self.state)

    def restore(self, state: object) -> None:
        import copy

        if not isinstance(state, EpisodeState) or state.task.env != self.name:
            raise ValueError(f"{self.name}: restore() needs a snapshot taken from a {self.name} env")
        self._state = copy.deepcopy(state)

    def step(self, assistant_text: str) -> StepResult:
        st = self.state
        if st.done:
            raise ValueError(f"{self.name}: step() after the episode ended; call reset()")
        st.turn += 1
        parsed = parse_turn(assistant_text)
        info: dict[str, Any] = {"turn": st.turn}
        if parsed.internal_error is not None:
            info["parser_exception"] = parsed.internal_error
        if parsed.answer is not None:
            st.done = True
            try:
                reward, score_info = self.score(st.task, parsed.answer)
            except Exception as exc:  # a scorer must never crash an episode
                reward, score_info = 0.0, {"score_error": f"{type(exc).__name__}: {exc}"}
            info.update(score_info, role="user", answer=parsed.answer)
            if parsed.calls:
                info["ignored_calls"] = [c.name for c in parsed.calls]
            return StepResult("", float(reward), True, info)
        if parsed.calls:
            results = []
            names = self.tool_names(st.task)
            for call in parsed.calls:
                if call.name not in names:
                    content = f"Error: unknown tool {call.name!r}; available: {sorted(names)}"
                else:
                    try:
                        content = self.call_tool(st, call)
                    except ValueError as exc:
                        content = f"Error: {exc}"
                st.tool_calls += 1
                results.append((call.name, content))
            info["role"] = "tool"
            info["tool_results"] = [{"name": n, "content": c} for n, c in results]
            if parsed.errors:
                info["error"] = "; ".join(parsed.errors)
            observation = format_tool_results(results)
            if parsed.errors:
                observation += "\nError: " + info["error"]
        else:
            info["role"] = "user"
            info["error"] = "; ".join(parsed.errors) if parsed.errors else "no tool call and no answer"
            observation = f"Error: {info['error']}. {FORMAT_HELP}"
        if st.turn >= self.max_turns:
            st.done = True
            info["truncated"] = True
            return StepResult(observation, 0.0, True, info)
        return StepResult(observation, 0.0, False, info)
