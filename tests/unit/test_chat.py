"""The agent loop's incremental pieces equal the chat template's rendering of the whole conversation."""

from __future__ import annotations

import json

from trace_rl.policy.chat import CHAT, IM_END
from trace_rl.rollout.toy_env import PYTHON_TOOL


def test_template_matches_incremental_pieces(tiny_policy):
    tok = tiny_policy.tokenizer
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(2+3)"}}</tool_call>'
    messages = [
        {"role": "user", "content": "Compute 2 + 3."},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "<answer>5</answer>"},
    ]
    rendered = tok.apply_chat_template(messages, tools=[PYTHON_TOOL], tokenize=False)
    pieces = (
        CHAT.prompt("Compute 2 + 3.", [PYTHON_TOOL])
        + call
        + IM_END
        + CHAT.observation("5")
        + "<answer>5</answer>"
        + IM_END
        + "\n"
    )
    assert rendered == pieces
    # the tool schema is in the system turn, as JSON
    assert json.dumps(PYTHON_TOOL) in rendered


def test_template_renders_structured_tool_calls_and_no_tools(tiny_policy):
    tok = tiny_policy.tokenizer
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "python", "arguments": {"code": "print(1)"}}}],
        },
    ]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert rendered.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
    assert (
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}</tool_call><|im_end|>' in rendered
    )
    assert CHAT.prompt("hi") == tok.apply_chat_template(
        messages[:1], tokenize=False, add_generation_prompt=True
    )


def test_tiny_tokenizer_roundtrip_and_digit_split(tiny_policy):
    tok = tiny_policy.tokenizer
    text = CHAT.prompt("What is 1234 * 56?") + "ünïcode ✓" + IM_END
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=False) == text
    digits = tok.encode("1234", add_special_tokens=False)
    assert [tok.decode([i]) for i in digits] == ["1", "2", "3", "4"]
    assert tiny_policy.stop_ids == (tok.convert_tokens_to_ids(IM_END),)
