"""`cache_hit_bounds` of benchmarks/rollout_engine.py (what the docs' replay hit-rate analysis rests on), on hand
cases: reuse = longest common prefix with sequences the same replica computed before the request was issued,
capped at the prompt length - 1, in whole blocks for the block bound."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location(
    "rollout_engine_bench", Path(__file__).parents[2] / "benchmarks" / "rollout_engine.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def req(
    prompt: list[int], output: list[int], replica: int, replay: bool, cached: int, after: int
) -> dict[str, Any]:
    return {"prompt": prompt, "output": output, "replica": replica, "replay": replay, "cached": cached,
            "issued_after": after}  # fmt: skip


def test_bounds_on_hand_cases() -> None:
    root = req(list(range(1, 11)), [11, 12, 13], 0, False, 0, 0)  # computed: 1..12 (13's KV never is)
    replay = req([*range(1, 13), 20, 21], [5], 0, True, 8, 1)  # shares 12 tokens: 3 blocks of 4
    elsewhere = req([*range(1, 13), 20, 21], [5], 1, True, 0, 1)  # another replica computed nothing
    same_time = req(list(range(1, 11)), [7], 0, True, 9, 0)  # issued before the root finished
    out = bench.cache_hit_bounds([root, replay, elsewhere, same_time], block=4)
    prompt = 14 + 14 + 10
    assert out["replay_requests"] == 3
    assert out["token_bound"] == round(12 / prompt, 3)
    assert out["block_bound"] == round(12 / prompt, 3)
    assert out["measured"] == round(17 / prompt, 3)
    assert out["mismatched_requests"] == 2  # replay (8 != 12) and same_time (9 != 0)
    assert out["new_tokens_per_request"] == round((prompt - 12) / 3, 1)
    full = req(list(range(1, 11)), [3], 0, True, 8, 1)  # the whole prompt was computed: the last is redone
    out = bench.cache_hit_bounds([root, full], block=4)
    assert (out["token_bound"], out["block_bound"], out["mismatched_requests"]) == (0.9, 0.8, 0)


def test_no_replays_gives_nan() -> None:
    out = bench.cache_hit_bounds([req([1, 2], [3], 0, False, 0, 0)], block=32)
    assert out["replay_requests"] == 0 and out["measured"] != out["measured"]  # NaN
