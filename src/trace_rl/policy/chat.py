"""The chat format every trace-rl policy uses: ChatML turns with Hermes-style tools.

One Jinja template renders system text, tool schemas, user turns, assistant turns (with optional structured
tool calls) and tool results. The agent loop never re-renders history: it appends token ids turn by turn, and
`ChatFormat` gives the exact strings it appends, which are the template's own pieces (a unit test checks that
rendering a whole conversation with the template equals the concatenation of these pieces).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
DEFAULT_SYSTEM = "You are a helpful assistant."
TOOL_INSTRUCTIONS = (
    "You may call one or more functions. Function signatures are inside <tools></tools>:\n<tools>\n"
)
TOOL_FORMAT = (
    '</tools>\nCall a function as <tool_call>{"name": <name>, "arguments": <json object>}</tool_call>. '
    "Give the final answer as <answer>...</answer>."
)

# ChatML + Hermes tool calls (the Qwen convention). Tool results come back inside a user turn wrapped in
# <tool_response> tags, exactly as Qwen2.5/Qwen3 render them.
CHAT_TEMPLATE = (
    "{%- set sys = (messages[0]['content'] if messages and messages[0]['role'] == 'system' else '"
    + DEFAULT_SYSTEM
    + "') -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n' + sys + '\\n\\n" + TOOL_INSTRUCTIONS.replace("\n", "\\n") + "' }}"
    "{%- for tool in tools -%}{{ tool | tojson }}{{ '\\n' }}{%- endfor -%}"
    "{{ '" + TOOL_FORMAT.replace('"', '\\"').replace("\n", "\\n") + "<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{ '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls', []) -%}"
    "{%- set fn = call['function'] if 'function' in call else call -%}"
    "{{ '<tool_call>' + ({'name': fn['name'], 'arguments': fn['arguments']} | tojson) + '</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class ChatFormat:
    """The strings the agent loop appends between turns (pieces of `CHAT_TEMPLATE`).

    A model turn ends with the end-of-turn token `<|im_end|>` (sampled by the model, loss mask 1); what follows
    until the next model token is template + observation text (loss mask 0).
    """

    end_of_turn: str = IM_END

    def system_text(self, tools: Sequence[dict[str, object]] = (), system: str | None = None) -> str:
        """The system message's content: the system text, then (with tools) the tool instructions, one JSON
        schema per line and the call format. ``prompt`` renders it; a chat-message view of the same prompt
        (e.g. a verl dataset row) uses it as the system message so that length filters count the tools."""
        sys = system if system is not None else DEFAULT_SYSTEM
        if not tools:
            return sys
        schemas = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tools)
        return f"{sys}\n\n{TOOL_INSTRUCTIONS}{schemas}{TOOL_FORMAT}"

    def prompt(self, user: str, tools: Sequence[dict[str, object]] = (), system: str | None = None) -> str:
        """The first context: system (+ tools), the user's prompt, and the assistant header."""
        head = f"{IM_START}system\n{self.system_text(tools, system)}{IM_END}\n"
        return f"{head}{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"

    def observation(self, observation: str) -> str:
        """What follows a model turn's `<|im_end|>`: newline, the tool result turn, the next assistant header."""
        return f"\n{IM_START}user\n<tool_response>\n{observation}\n</tool_response>{IM_END}\n{IM_START}assistant\n"


CHAT = ChatFormat()
