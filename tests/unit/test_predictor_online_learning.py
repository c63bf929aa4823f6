"""End to end: synthetic trees -> node_examples -> OnlineTrainer -> tiny predictor, scored against true values.

Each prompt "What is a + b - c ...?" has a hidden first-turn success rate p (fewer terms: higher p). A rollout's
first turn observes "ok" with probability p, then ends in success with probability 0.9 after "ok" and 0.1 after
"error". True values: prompt 0.9 p + 0.1 (1 - p); a depth-1 prefix 0.9 or 0.1. The later prefix reveals more,
so the predictor must end up better at depth 1 than at depth 0 (the paper's claim that the achievable error
does not grow with depth), and it must rank both levels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.predictor import OnlineConfig, OnlineTrainer, build_predictor, node_examples, serialize_anchor  # noqa: E402
from trace_rl.predictor.metrics import error_by_depth  # noqa: E402
from trace_rl.types import Turn  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@dataclass
class Tree:
    parent: np.ndarray
    depth: np.ndarray
    reward: np.ndarray
    turns: list[Turn | None]

    def value_targets(self) -> np.ndarray:
        # mean leaf reward below each node; parents precede children, so sum leaves bottom-up
        total = np.where(np.isnan(self.reward), 0.0, self.reward)
        count = (~np.isnan(self.reward)).astype(float)
        for i in range(len(self.parent) - 1, 0, -1):
            total[self.parent[i]] += total[i]
            count[self.parent[i]] += count[i]
        return total / count


def prompt_of(rng: np.random.Generator) -> tuple[str, float]:
    k = int(rng.integers(2, 7))
    expr = " + ".join(str(int(rng.integers(1, 100))) for _ in range(k))
    return f"What is {expr}?", float(1.0 - 0.18 * (k - 2) - 0.05)  # p in [0.23, 0.95]


def grow(rng: np.random.Generator, prompt: str, p: float, roots: int = 4, replays: int = 2) -> Tree:
    parent, depth, reward, turns = [-1], [0], [np.nan], [None]

    def add(par: int, d: int, r: float, turn: Turn) -> int:
        parent.append(par), depth.append(d), reward.append(r), turns.append(turn)
        return len(parent) - 1

    for _ in range(roots):
        ok = rng.random() < p
        mid = add(
            0, 1, np.nan, Turn(text="<tool_call>python</tool_call>", observation="ok" if ok else "error")
        )
        for _ in range(1 + replays):  # the root rollout's own ending, then replays from the anchor
            win = rng.random() < (0.9 if ok else 0.1)
            add(mid, 2, float(win), Turn(text=f"<answer>{int(win)}</answer>"))
    return Tree(np.array(parent), np.array(depth), np.array(reward), turns)  # type: ignore[arg-type]


def test_online_training_on_trees_learns_prompts_and_prefixes() -> None:
    rng = np.random.default_rng(0)
    pred = build_predictor("tiny", device="cpu")
    trainer = OnlineTrainer(pred, OnlineConfig(batch_size=16, prefix_share=0.25, passes=8, buffer_steps=3))
    for _ in range(40):  # 20 steps left the depth-1 ranking seed-dependent (seed 0: an "ok" prefix at 0.12)
        batch = [prompt_of(rng) for _ in range(16)]
        examples = [e for q, p in batch for e in node_examples(grow(rng, q, p), q, max_chars=pred.max_chars)]
        metrics = trainer.observe_step(examples)
    assert metrics["predictor/updates"] == 11.0  # ceil(8 passes * 16 prompts / 12 prompt slots)
    # held-out anchors with their true values
    texts, truth, depth = [], [], []
    for _ in range(100):
        q, p = prompt_of(rng)
        texts.append(serialize_anchor(q, max_chars=pred.max_chars))
        truth.append(0.9 * p + 0.1 * (1 - p))
        depth.append(0)
        ok = rng.random() < 0.5
        turn = Turn(text="<tool_call>python</tool_call>", observation="ok" if ok else "error")
        texts.append(serialize_anchor(q, [turn], max_chars=pred.max_chars))
        truth.append(0.9 if ok else 0.1)
        depth.append(1)
    scores = pred.predict(texts)
    by_depth = error_by_depth(scores, truth, depth)
    # measured with rng seeds 0-3 (40 steps): depth 0 MSE 0.014-0.023, Spearman 0.71-0.92; depth 1 MSE 0.0001-0.010,
    # and every seed separated the depth-1 "ok" and "error" prefixes
    assert by_depth[0].spearman > 0.6, by_depth
    assert by_depth[1].mse < by_depth[0].mse, by_depth
    # depth 1: the "ok" prefixes rank above the "error" prefixes (Spearman against a two-valued truth is capped
    # near 0.87, so the pairwise ranking, i.e. the AUC, is the sharper check). Not every pair: on the 2026-12-04
    # machine one "ok" prefix of a 6-term prompt (a rare pair in training: such prompts observe "ok" 23% of the
    # time) scored 0.19, AUC 0.9992; an earlier machine separated every pair. A predictor that ignored the
    # observation would score AUC near 0.5.
    d1, t = scores[np.array(depth) == 1], np.array(truth)[np.array(depth) == 1]
    ok, error = d1[t == 0.9], d1[t == 0.1]
    auc = float((ok[:, None] > error[None, :]).mean())
    assert auc >= 0.99, (auc, np.sort(ok)[:3], np.sort(error)[-3:])
    assert np.median(ok) - np.median(error) > 0.5, (np.median(ok), np.median(error))
