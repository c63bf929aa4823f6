"""The tiny policy's tokenizer: byte-level BPE with one token per digit, shipped as `tiny_tokenizer.json`.

Any text is encodable (byte fallback through the byte-level alphabet). Digits are split one per token, as in
the arithmetic probe of RESOURCES.md, so that copying a number is a per-digit skill. The merges were learned
from `_corpus()` by `build_tiny_tokenizer()`; the shipped file is what the tiny policy uses, so that a change in
the `tokenizers` trainer never changes an existing model's vocabulary.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from trace_rl.policy.chat import CHAT, CHAT_TEMPLATE, IM_END, IM_START

SPECIAL_TOKENS = ("<|endoftext|>", IM_START, IM_END)
TINY_VOCAB_SIZE = 512
TOKENIZER_FILE = "tiny_tokenizer.json"


def _corpus() -> list[str]:
    """Deterministic training text: the chat format, tool-call skeletons, arithmetic, common words."""
    tools: list[dict[str, object]] = [
        {
            "type": "function",
            "function": {
                "name": "python",
                "description": "Run Python code and return what it prints.",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "Python source"}},
                    "required": ["code"],
                },
            },
        }
    ]
    texts = []
    ops = ["+", "-", "*", "/", "**", "%", "//"]
    for i in range(400):
        a, b, c = (i * 37) % 997, (i * 91) % 113, (i * 13) % 29
        op1, op2 = ops[i % len(ops)], ops[(i // 3) % len(ops)]
        expr = f"{a} {op1} {b} {op2} {c}"
        q = f"What is {expr}? Use the python tool, then give the final answer."
        call = '<tool_call>{"name": "python", "arguments": {"code": "print(' + expr + ')"}}</tool_call>'
        texts.append(CHAT.prompt(q, tools if i % 2 == 0 else ()) + call + IM_END)
        texts.append(
            CHAT.observation(str(a + b)) + f"The result is {a + b}. <answer>{a + b}</answer>{IM_END}"
        )
        texts.append("Error: could not parse the tool call. Answer: the number of the value of x is")
    words = (
        "the a an of to in and is it that for on with as by at from this be are was result answer question "
        "find compute calculate value number sum product difference total equal true false none error "
        "search query document title text name arguments function call tool response user assistant system"
    )
    texts.extend([words] * 20)
    return texts


def build_tiny_tokenizer(vocab_size: int = TINY_VOCAB_SIZE) -> Any:
    """Train the byte-level BPE on `_corpus()` and return a `tokenizers.Tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def load_tiny_tokenizer() -> Any:
    """The shipped tiny tokenizer as a `PreTrainedTokenizerFast` with the trace-rl chat template.

    Returns a tokenizer with eos = pad = `<|im_end|>` (the end-of-turn token).
    """
    from tokenizers import Tokenizer

    text = resources.files("trace_rl.policy").joinpath(TOKENIZER_FILE).read_text(encoding="utf-8")
    return wrap_tokenizer(Tokenizer.from_str(text))


def wrap_tokenizer(tok: Any) -> Any:
    """Wrap a `tokenizers.Tokenizer` built by `build_tiny_tokenizer` for transformers."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=None, eos_token=IM_END, pad_token=IM_END, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_tiny_tokenizer(path: Path) -> None:
    """Regenerate the shipped tokenizer file (maintainers only)."""
    path.write_text(build_tiny_tokenizer().to_str(pretty=False), encoding="utf-8")
