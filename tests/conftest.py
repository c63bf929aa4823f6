"""Shared fixtures: one tiny policy per test session (random init, seeded) and torch kept to one thread."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    from trace_rl.policy import load_policy

    return load_policy("tiny", seed=1)
