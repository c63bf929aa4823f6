"""The state-aware convex predictor (issue 23, item 1): the policy's hidden state at an anchor's token context as a
feature block, and the offline evaluation of benchmarks/prefix_predictor.py (folds over prompts, Spearman within
depth)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from trace_rl.predictor import build_predictor
from trace_rl.predictor.policy_state import PolicyStateEncoder

_spec = importlib.util.spec_from_file_location(
    "prefix_predictor_bench", Path(__file__).parents[2] / "benchmarks" / "prefix_predictor.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def tiny_lm(seed: int = 0):  # type: ignore[no-untyped-def]
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    return Qwen3ForCausalLM(config).eval()


def test_encoder_reads_the_last_and_mean_hidden_state_of_each_context_despite_padding() -> None:
    import torch

    model = tiny_lm()
    enc = PolicyStateEncoder(model, pad_id=0, batch=8)
    contexts = [[5, 6, 7], [5, 6, 7, 8, 9, 10], [3]]
    enc.register(["a", "b", "c"], contexts)
    rows = enc(["a", "b", "c", "a"])
    assert rows.shape == (4, 32) and enc.width == 32
    for row, ids in zip(rows, [*contexts, contexts[0]], strict=True):
        with torch.inference_mode():  # each context alone, no padding
            h = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0].double().numpy()
        np.testing.assert_allclose(row[:16], h[-1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(row[16:], h.mean(0), rtol=1e-4, atol=1e-5)
    # the live weights are read at every call: a changed policy changes the feature
    with torch.no_grad():
        model.model.norm.weight.mul_(2.0)
    np.testing.assert_allclose(enc(["a"])[0], 2.0 * rows[0], rtol=1e-4, atol=1e-5)


def test_encoder_refuses_unregistered_texts_and_forgets_beyond_capacity() -> None:
    enc = PolicyStateEncoder(tiny_lm(), capacity=2)
    with pytest.raises(ValueError, match="no token context registered"):
        enc(["never registered"])
    enc.register(["a", "b", "c"], [[1], [2], [3]])
    with pytest.raises(ValueError, match="no token context"):
        enc.context("a")  # the oldest of three, capacity 2
    assert enc.context("c").tolist() == [3]
    with pytest.raises(ValueError, match="2 texts but 1"):
        enc.register(["x", "y"], [[1]])
    with pytest.raises(ValueError, match="non-empty"):
        enc.register(["x"], [[]])
    with pytest.raises(ValueError, match="pooling"):
        PolicyStateEncoder(tiny_lm(), pooling="max")


def state_rows(good: np.ndarray) -> np.ndarray:
    """A 'policy state' that knows the outcome: good states point one way, the others the other, plus noise."""
    rng = np.random.default_rng(len(good))
    sign = np.where(good, 1.0, -1.0)
    return np.c_[sign + 0.1 * rng.standard_normal(len(good)), 0.1 * rng.standard_normal((len(good), 3))]


def fake_state(texts: list[str]) -> np.ndarray:
    return state_rows(np.array([t.endswith("good") for t in texts]))


def outcome_data(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """Random texts (nothing in their n-grams predicts success) whose hidden 'state' decides the outcome."""
    rng = np.random.default_rng(seed)
    texts, y = [], []
    for i in range(n):
        good = bool(rng.random() < 0.5)
        word = "".join(rng.choice(list("abcdefgh"), 12))
        texts.append(f"[PROMPT]\n{word} {seed} {i}\n[TURN 1]\n{'good' if good else 'bad0'}")
        y.append(float(rng.random() < (0.9 if good else 0.1)))
    return texts, np.asarray(y)


def test_state_predictor_learns_from_the_state_block_where_text_features_cannot() -> None:
    train, y = outcome_data(200, 0)
    test, y_test = outcome_data(100, 1)
    # hide the outcome from the text: the state function reads it from a lookup, the texts end alike
    truth = {t: t.endswith("good") for t in train + test}
    masked = {t: t[:-4] + "xxxx" for t in train + test}
    back = {v: k for k, v in masked.items()}

    def state(texts: list[str]) -> np.ndarray:
        return state_rows(np.array([truth[back[t]] for t in texts]))

    pred = build_predictor("state-head")
    pred.attach_state(state)  # type: ignore[attr-defined]
    pred.update([masked[t] for t in train], y)
    v = pred.predict([masked[t] for t in test])
    good = np.array([truth[t] for t in test])
    assert v[good].mean() > 0.75 and v[~good].mean() < 0.25
    assert np.mean((v > 0.5) == (y_test > 0.5)) > 0.75
    text_only = build_predictor("ngram")
    text_only.update([masked[t] for t in train], y)
    w = text_only.predict([masked[t] for t in test])
    assert abs(w[good].mean() - w[~good].mean()) < 0.15  # the text alone carries nothing


def test_state_predictor_round_trips_its_state_rows_and_refuses_misuse() -> None:
    train, y = outcome_data(60, 2)
    test, _ = outcome_data(10, 3)
    pred = build_predictor("state-head")
    with pytest.raises(ValueError, match="attach_state"):
        pred.update(train, y)
    pred.attach_state(fake_state)  # type: ignore[attr-defined]
    pred.update(train, y)
    state = pred.state_dict()
    assert len(state["batches"][0]["states"]) == 60
    again = build_predictor("state-head")
    again.attach_state(lambda texts: pytest.fail("restored rows must not be recomputed"))  # type: ignore[attr-defined]
    again.load_state_dict(state)
    again.attach_state(fake_state)  # type: ignore[attr-defined]
    np.testing.assert_allclose(again.predict(test), pred.predict(test), rtol=1e-12)
    del state["batches"][0]["states"]
    with pytest.raises(ValueError, match="states"):
        build_predictor("state-head").load_state_dict(state)
    with pytest.raises(ValueError, match="reads no policy state"):
        build_predictor("ngram").attach_state(fake_state)  # type: ignore[attr-defined]


def test_folds_keep_each_prompt_whole_and_spearman_is_taken_within_depth() -> None:
    fold = bench.group_folds(11, 5, seed=0)
    assert sorted(np.bincount(fold).tolist()) == [2, 2, 2, 2, 3]
    with pytest.raises(ValueError, match="folds"):
        bench.group_folds(3, 5, seed=0)
    # within each depth the prediction ranks perfectly, but depth 2's level is below depth 1's: pooled over depths
    # the ranking would be poor, within depth it is 1
    depth = np.repeat([1, 2], 10)
    target = np.r_[np.linspace(0.5, 1.0, 10), np.linspace(0.0, 0.4, 10)]
    pred = np.r_[np.linspace(0.0, 0.1, 10), np.linspace(0.5, 0.9, 10)]
    out = bench.spearman_within_depth(pred, target, depth)
    assert out["by_depth"] == {1: (pytest.approx(1.0), 10), 2: (pytest.approx(1.0), 10)}
    assert out["within_depth"] == pytest.approx(1.0)
    reversed_d2 = bench.spearman_within_depth(np.r_[pred[:10], pred[10:][::-1]], target, depth)
    assert reversed_d2["within_depth"] == pytest.approx(0.0)
    assert bench.flip_rate([1.0, 0.0, 0.0, 1.0], 0.0) == 0.5


def test_training_rows_count_the_rollout_once_more_than_its_replays() -> None:
    prompt = {
        "text": "[PROMPT]\np\n",
        "roots": [0.0, 1.0, 1.0, 1.0],
        "anchors": [{"text": "t1", "reward": 0.0, "replays": [1.0, 0.0, 0.0, 0.0], "depth": 1}],
    }
    texts, targets, weights = bench.training_rows([prompt])
    assert texts == ["[PROMPT]\np\n", "t1"]
    np.testing.assert_allclose(targets, [0.75, 0.2])
    np.testing.assert_allclose(weights, [4.0, 5.0])


def test_node_contexts_are_the_prompt_then_the_turns_down_to_each_inner_node() -> None:
    from trace_rl.predictor import serialize_anchor
    from trace_rl.predictor.policy_state import node_contexts
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Turn

    def turn(ids: list[int], text: str) -> Turn:
        arr = np.asarray(ids, np.int64)
        return Turn(arr, np.ones(arr.size, np.int8), np.zeros(arr.size, np.float32), text, "obs " + text)

    tree = RolloutTree.new(prompt_ids=[1, 2])
    a, b, _ = tree.add_rollout([turn([3], "a"), turn([4, 5], "b"), turn([6], "c")], reward=1.0)
    tree.add_replay(int(b), [turn([7], "d")], reward=0.0)
    texts, contexts = node_contexts(tree, "p", [1, 2], max_chars=256)
    assert [c.tolist() for c in contexts] == [
        [1, 2],
        [1, 2, 3],
        [1, 2, 3, 4, 5],
    ]  # root, a, b (leaves left out)
    assert texts[2] == serialize_anchor("p", [tree.turns[int(a)], tree.turns[int(b)]], max_chars=256)


def test_trainer_attaches_its_live_policy_and_registers_what_it_trains_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from trace_rl.train.config import load_config
    from trace_rl.train.run import Trainer

    cfg = load_config(
        preset="smoke",
        overrides=[
            "predictor.name=state-head",
            "predictor.updates=8",
            "predictor.batch_size=32",
            "steps=1",
            "eval_every=0",
        ],
    )
    t = Trainer(cfg, tmp_path / "run", log=lambda s: None)
    t.setup()
    encoder = t.predictor.blocks["state"].encoder  # type: ignore[attr-defined]
    assert isinstance(encoder, PolicyStateEncoder) and encoder.model is t.policy.model
    t.run(progress=False)
    assert t.predictor.num_updates == 1  # type: ignore[attr-defined]
    (batch,) = t.predictor._batches  # type: ignore[attr-defined]
    assert batch.kept["states"].shape == (len(batch.texts), 2 * t.policy.model.config.hidden_size)
    assert any("[TURN 1]" in text for text in batch.texts)  # tree nodes, not only prompts, got their contexts


def test_prepare_embeds_prompts_without_running_the_policy() -> None:
    from trace_rl.predictor.convex import ConvexConfig, ConvexSuccessPredictor

    def encoder(texts: list[str]) -> np.ndarray:
        return np.ones((len(texts), 3))

    def no_state(texts: list[str]) -> np.ndarray:
        raise AssertionError("prepare must not compute (and discard) policy states")

    pred = ConvexSuccessPredictor(
        "ngram+minilm+state", ConvexConfig(features="ngram+minilm+state"), encoder, no_state
    )
    pred.prepare(["[PROMPT]\na\n", "[PROMPT]\nb\n"])
    assert len(pred.blocks["minilm"].cache) == 2  # type: ignore[attr-defined]


def test_replay_allocator_registers_each_anchors_save_point_before_scoring() -> None:
    import asyncio

    from trace_rl.allocation import METHODS
    from trace_rl.predictor import serialize_anchor
    from trace_rl.rollout.agent import SavePoint
    from trace_rl.train.prefixes import prefix_budget, replay_allocator
    from trace_rl.tree import RolloutTree
    from trace_rl.types import Anchor, Task, Turn

    tree = RolloutTree.new()
    rollouts = [[Turn(text="a1"), Turn(text="a2"), Turn(text="end")], [Turn(text="b1"), Turn(text="end")]]
    nodes = [tree.add_rollout(turns, r) for turns, r in zip(rollouts, [1.0, 0.0], strict=True)]
    anchors = [
        Anchor(int(nodes[0][0]), 1, 1.0),
        Anchor(int(nodes[0][1]), 2, 1.0),
        Anchor(int(nodes[1][0]), 1, 0.0),
    ]
    points = [
        SavePoint(np.array(ids, np.int64), None, a.depth)
        for ids, a in zip([[1, 2], [1, 2, 3], [4]], anchors, strict=True)
    ]
    predictor = build_predictor("state-head")
    encoder = PolicyStateEncoder(tiny_lm())
    predictor.attach_state(encoder)  # type: ignore[attr-defined]
    method = METHODS["trace"]
    budget, _ = prefix_budget(2, 0.5, method=method, accounting="paper")
    alloc = replay_allocator(method, predictor, replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0))
    asyncio.run(alloc(Task(id="p", env="x", prompt="p"), tree, anchors, points, budget))
    for a, point in zip(anchors, points, strict=True):
        text = serialize_anchor("p", [tree.turns[int(y)] for y in tree.path_to(a.node)[1:]], max_chars=2048)
        assert encoder.context(text).tolist() == point.token_ids.tolist()
