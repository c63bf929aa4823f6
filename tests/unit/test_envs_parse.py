"""parse_turn: each wild tool-call shape of RESOURCES.md decided on purpose."""

from __future__ import annotations

import pytest

from trace_rl.envs import base, load_tasks, make_env
from trace_rl.envs.base import (
    MAX_CALL_CHARS,
    MAX_CALLS_PER_TURN,
    MAX_CLOSE_TAGS_TRIED,
    MAX_LITERAL_CHARS,
    parse_turn,
)


def test_single_call_and_text_after() -> None:
    p = parse_turn(
        'thinking <tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call> then more'
    )
    assert [(c.name, c.arguments) for c in p.calls] == [("python", {"code": "print(1)"})]
    assert p.answer is None and p.errors == ()


def test_several_calls_in_order_and_inside_code_fence() -> None:
    text = '```\n<tool_call>{"name": "a", "arguments": {}}</tool_call>\n```\n<tool_call>{"name": "b", "arguments": {"x": 1}}</tool_call>'
    assert [c.name for c in parse_turn(text).calls] == ["a", "b"]


def test_closing_tag_inside_string_argument() -> None:
    p = parse_turn(
        '<tool_call>{"name": "python", "arguments": {"code": "print(\'</tool_call>\')"}}</tool_call>'
    )
    assert p.calls[0].arguments == {"code": "print('</tool_call>')"} and p.errors == ()


def test_missing_closing_tag_accepted_when_json_complete() -> None:
    assert parse_turn('<tool_call>{"name": "search", "arguments": {"query": "x"}}').calls[0].name == "search"


def test_single_quoted_pseudo_json_and_parameters_alias() -> None:
    p = parse_turn("<tool_call>{'name': 'search', 'parameters': {'query': 'paris'}}</tool_call>")
    assert p.calls[0].arguments == {"query": "paris"} and p.errors == ()


def test_both_arguments_and_parameters_is_error_not_silent() -> None:
    p = parse_turn('<tool_call>{"name": "f", "arguments": {"a": 1}, "parameters": {"b": 2}}</tool_call>')
    assert p.calls == () and "both" in p.errors[0]


def test_arguments_as_json_string_and_bad_string() -> None:
    ok = parse_turn('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert ok.calls[0].arguments == {"a": 1}
    bad = parse_turn('<tool_call>{"name": "f", "arguments": "{a: oops"}</tool_call>')
    assert bad.calls == () and "not valid JSON" in bad.errors[0]  # never run with emptied arguments


def test_malformed_json_and_missing_name() -> None:
    assert parse_turn("<tool_call>{not json at all</tool_call>").errors
    assert "name" in parse_turn('<tool_call>{"arguments": {}}</tool_call>').errors[0]


def test_answer_and_think_stripping() -> None:
    p = parse_turn("<think>maybe <answer>3</answer></think>The result: <answer> 42 </answer>")
    assert p.answer == "42"


def test_answer_with_calls_keeps_calls_listed() -> None:
    p = parse_turn('<tool_call>{"name": "a", "arguments": {}}</tool_call><answer>1</answer>')
    assert p.answer == "1" and len(p.calls) == 1


def test_too_many_calls_is_error() -> None:
    one = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    p = parse_turn(one * (MAX_CALLS_PER_TURN + 1))
    assert p.calls == () and "too many" in p.errors[0]


# ---- issue 16: whatever stands between a decoded object and its closing tag never vanishes -------------------
def test_glued_objects_in_one_block_are_separate_calls() -> None:
    text = (
        '<tool_call>{"name": "ls", "arguments": {"a": 1}}{"name": "cd", "arguments": {"folder": "x"}}\n'
        '  {"name": "pwd"}</tool_call> bye'
    )
    p = parse_turn(text)
    assert [(c.name, c.arguments) for c in p.calls] == [
        ("ls", {"a": 1}),
        ("cd", {"folder": "x"}),
        ("pwd", {}),
    ]
    assert p.errors == ()


def test_glued_objects_count_against_the_call_cap() -> None:
    obj = '{"name": "a", "arguments": {}}'
    assert len(parse_turn(OPEN + obj * MAX_CALLS_PER_TURN + CLOSE).calls) == MAX_CALLS_PER_TURN
    p = parse_turn(OPEN + obj * (MAX_CALLS_PER_TURN + 1) + CLOSE)
    assert p.calls == () and "too many" in p.errors[0]


@pytest.mark.parametrize("stray", [', {"name": "b", "arguments": {}}', " and then b", '; {"name": "b"}', "]"])
def test_stray_text_before_the_closing_tag_is_an_error(stray: str) -> None:
    p = parse_turn(OPEN + '{"name": "a", "arguments": {}}' + stray + CLOSE + OPEN + '{"name": "c"}' + CLOSE)
    assert [c.name for c in p.calls] == ["a", "c"]
    assert len(p.errors) == 1 and "unexpected text after a tool call" in p.errors[0]
    assert stray.strip()[:10] in p.errors[0]


def test_glued_second_object_that_is_malformed_is_an_error() -> None:
    p = parse_turn(OPEN + '{"name": "a", "arguments": {}}{"arguments": {}}' + CLOSE)
    assert [c.name for c in p.calls] == ["a"] and p.errors == ("tool call has no 'name' string",)


def test_env_reports_glued_calls_and_stray_text() -> None:
    env = make_env("math_python")
    env.reset(load_tasks("math_python", "train", limit=1)[0])
    call = '{"name": "python", "arguments": {"code": "print(6*7)"}}'
    res = env.step(OPEN + call + call + CLOSE)
    assert [r["content"].strip() for r in res.info["tool_results"]] == ["42", "42"]
    res = env.step(OPEN + call + " trailing words" + CLOSE)
    assert len(res.info["tool_results"]) == 1 and "trailing words" in res.observation


# ---- regressions: inputs that used to raise out of parse_turn (and so crash env.step) ----------------------
OPEN, CLOSE = "<tool_call>", "</tool_call>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # json raw_decode raised ValueError (int digit limit), not JSONDecodeError
        (OPEN + '{"name": "x", "arguments": {}, "z": ' + "1" * 5000 + "}" + CLOSE, "not valid JSON"),
        # raw_decode raised RecursionError on deep nesting
        (OPEN + '{"name": "x", "arguments": ' + "[" * 50_000 + CLOSE, "not valid JSON"),
        # ast.literal_eval raised TypeError (unhashable dict key)
        (OPEN + "{'name': 'python', 'arguments': {[1]: 2}}" + CLOSE, "not valid JSON"),
        # json.loads of string-valued arguments raised RecursionError / ValueError
        (
            OPEN + '{"name": "x", "arguments": "' + "[" * 20_000 + '"}' + CLOSE,
            "string that is not valid JSON",
        ),
        (
            OPEN + '{"name": "x", "arguments": "{\\"a\\": ' + "1" * 5000 + '}"}' + CLOSE,
            "string that is not valid JSON",
        ),
    ],
)
def test_pathological_calls_become_errors(text: str, expected: str) -> None:
    p = parse_turn(text)
    assert p.calls == () and p.internal_error is None
    assert len(p.errors) == 1 and expected in p.errors[0]


def test_literal_fallback_work_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    # 100 unparsable calls: the fallback used to literal_eval the text up to every later closing tag of every
    # call (100 + 99 + ... + 1 = 5050 evaluations, quadratic). Now at most MAX_CALLS_PER_TURN blocks are
    # parsed, each trying at most MAX_CLOSE_TAGS_TRIED closing tags plus the whole window.
    import ast

    calls = []
    real = ast.literal_eval

    def counting(node_or_string: str) -> object:
        calls.append(len(node_or_string))
        return real(node_or_string)

    monkeypatch.setattr(base.ast, "literal_eval", counting)
    p = parse_turn((OPEN + "{" + "x" * 10 + CLOSE) * 100)
    assert p.calls == () and "too many tool calls" in p.errors[-1]
    assert len(calls) <= MAX_CALLS_PER_TURN * (MAX_CLOSE_TAGS_TRIED + 1)
    # one call followed by many closing tags: at most MAX_CLOSE_TAGS_TRIED + 1 evaluations, each bounded
    calls.clear()
    p = parse_turn(OPEN + "{'a': " + ("[1, " + CLOSE) * 500)
    assert len(p.errors) == 1 and len(calls) <= MAX_CLOSE_TAGS_TRIED + 1
    assert max(calls) <= MAX_LITERAL_CHARS


def test_over_long_call_is_an_error_naming_the_cap() -> None:
    p = parse_turn(OPEN + '{"name": "python", "arguments": {"code": "' + "x" * MAX_CALL_CHARS + '"}}' + CLOSE)
    assert p.calls == () and str(MAX_CALL_CHARS) in p.errors[0]


def test_parser_bug_becomes_error_observation_with_exception_type(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(text: str) -> base.ParsedTurn:
        raise RuntimeError("simulated parser bug")

    monkeypatch.setattr(base, "_parse_turn", broken)
    p = parse_turn("anything")
    assert p.internal_error == "RuntimeError" and p.calls == () and p.answer is None and p.errors
    assert "simulated parser bug" in caplog.text  # logged with its traceback, not hidden
    env = make_env("math_python", max_turns=3)
    env.reset(load_tasks("math_python", limit=1)[0])
    r = env.step("<answer>1</answer>")
    assert not r.done and r.reward == 0.0 and r.observation.startswith("Error")
    assert r.info["parser_exception"] == "RuntimeError" and r.info["turn"] == 1
