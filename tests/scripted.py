"""Scripted generation parts for scheduler and step tests: every turn samples one token, and the env alone
decides the reward (so a test scripts outcomes, not text)."""

from __future__ import annotations

import numpy as np

from trace_rl.rollout.backends import Completion


class OneTokenBackend:
    """A generation backend whose every completion is the single token 5 (log-probability -1)."""

    async def generate(self, prompt_token_ids, sampling, n=1):  # type: ignore[no-untyped-def]
        return [Completion(np.asarray([5], np.int64), np.asarray([-1.0], np.float32), "stop")] * n


class FixedCodec:
    """A chat codec with a one-token prompt, one-token observations and the turn text "t"."""

    end_of_turn = 0

    def prompt_ids(self, first, tools):  # type: ignore[no-untyped-def]
        return [1]

    def observation_ids(self, obs):  # type: ignore[no-untyped-def]
        return [9]

    def turn_text(self, ids, stop_ids=()):  # type: ignore[no-untyped-def]
        return "t"
