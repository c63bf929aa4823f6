"""parse_turn never raises, whatever the model writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trace_rl.envs.base import parse_turn

FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<answer>",
        "</answer>",
        "{",
        "}",
        '"name"',
        ":",
        "'",
        "<think>",
        '"arguments"',
        "[",
        "]",
        ",",
        "1e999",
        "\\",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=30))
def test_parse_turn_total(parts: list[str]) -> None:
    p = parse_turn("".join(parts))
    for call in p.calls:
        assert isinstance(call.name, str) and call.name and isinstance(call.arguments, dict)
