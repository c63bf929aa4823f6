"""trace-rl: TRACE rollout allocation (arXiv 2606.11119) for agentic reinforcement learning of language models."""

__version__ = "0.1.0"
