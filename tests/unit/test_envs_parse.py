"""parse_turn: each wild tool-call shape of RESOURCES.md decided on purpose."""

from __future__ import annotations

from trace_rl.envs.base import MAX_CALLS_PER_TURN, parse_turn


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
