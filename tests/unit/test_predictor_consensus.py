"""The group-aware convex predictor (issue 23, item 1): what a prompt's other root rollouts say about a prefix
(`trace_rl.predictor.consensus`) as a feature block, registered by the drivers before they score or train."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trace_rl.predictor.capabilities import Capability
from trace_rl.predictor.consensus import (
    GROUP_FEATURES,
    GROUP_PRIOR_FEATURES,
    examples_consensus,
    prior_columns,
    same_state_outcomes,
    sibling_consensus,
)
from trace_rl.predictor.convex import ConvexConfig, ConvexSuccessPredictor
from trace_rl.tree import RolloutTree
from trace_rl.types import Turn


def chain(*observations: str, who: str = "") -> list[Turn]:
    """A rollout's turns: actions named by ``who`` (the predictor text differs per root unless ``who`` agrees)."""
    return [Turn(text=f"{who} act {i}", observation=obs) for i, obs in enumerate(observations)]


def four_roots(rewards: tuple[float, ...] = (1.0, 0.0, 1.0, 0.0)) -> tuple[RolloutTree, list[np.ndarray]]:
    """Roots A, B, C share the first observation ("x"); A and B also the second ("y"); D saw "z" first."""
    tree = RolloutTree.new()
    rollouts = [chain("x", "y", "", who=w) for w in "AB"] + [
        chain("x", "w", "", who="C"),
        chain("z", "", who="D"),
    ]
    return tree, [tree.add_rollout(t, r) for t, r in zip(rollouts, rewards, strict=True)]


def test_rows_count_the_other_roots_in_the_same_state_and_their_successes() -> None:
    tree, (a, _b, c, d) = four_roots()
    rows = sibling_consensus(tree, [0, a[0], a[1], c[1], d[0]])
    assert rows.shape == (5, len(GROUP_FEATURES))
    np.testing.assert_allclose(rows[0], [0, 0, 0])  # the prompt: every root passes through it
    # A at depth 1: B and C share "x" (C solved), D does not; others B, C, D solved 1 of 3
    np.testing.assert_allclose(rows[1], [2 / 3, 1 / 3, 1 / 3])
    # A at depth 2: only B shares ("x", "y"), and B failed
    np.testing.assert_allclose(rows[2], [1 / 3, 0, 1 / 3])
    # C at depth 2 ("x", "w"): nobody else is there; others A, B, D solved 1 of 3
    np.testing.assert_allclose(rows[3], [0, 0, 1 / 3])
    # D at depth 1 ("z"): alone; A, B, C solved 2 of 3
    np.testing.assert_allclose(rows[4], [0, 0, 2 / 3])


def test_a_nodes_own_outcome_never_enters_its_row_but_enters_its_siblings() -> None:
    tree, (a, b, _, _) = four_roots((1.0, 0.0, 1.0, 0.0))
    flipped, (a2, b2, _, _) = four_roots((0.0, 0.0, 1.0, 0.0))  # only A's own reward differs
    np.testing.assert_allclose(sibling_consensus(tree, a), sibling_consensus(flipped, a2))
    assert not np.allclose(sibling_consensus(tree, b), sibling_consensus(flipped, b2))


def test_replay_nodes_compare_with_every_root_and_replays_never_count_as_siblings() -> None:
    tree, (a, b, _c, _d) = four_roots()
    before = sibling_consensus(tree, [b[1]])
    replay = tree.add_replay(int(a[0]), chain("y", ""), reward=1.0)  # from A's depth-1 prefix, sees "y" again
    np.testing.assert_allclose(sibling_consensus(tree, [b[1]]), before)  # the replay is not a root
    # the replay's depth-2 node: roots A and B are in state ("x", "y") (A solved, B failed) of all four roots
    np.testing.assert_allclose(sibling_consensus(tree, [replay[0]]), [[2 / 4, 1 / 4, 2 / 4]])
    with pytest.raises(ValueError, match="node ids"):
        sibling_consensus(tree, [tree.num_nodes])


def node_consensus(tree: RolloutTree, prompt: str) -> tuple[list[str], np.ndarray]:
    """What step.py registers for a tree: examples_consensus over its node_examples."""
    from trace_rl.predictor import node_examples

    return examples_consensus(tree, node_examples(tree, prompt, max_chars=256))


def test_examples_consensus_gives_the_trainers_texts_of_every_inner_node() -> None:
    from trace_rl.predictor import node_examples

    tree, _ = four_roots()
    texts, rows = node_consensus(tree, "p")
    inner = [e for e in node_examples(tree, "p", max_chars=256)]
    assert texts == [e.text for e in inner]  # the texts step.py trains on, in the same order
    assert [e.node for e in inner] == [int(n) for n in np.flatnonzero(~tree.is_leaf())]  # every inner node
    np.testing.assert_allclose(
        rows, sibling_consensus(tree, [e.node for e in inner])
    )  # distinct texts: per node
    np.testing.assert_allclose(rows, sibling_consensus(tree, [e.node for e in inner], keys=texts))


def fake_encoder(texts: list[str]) -> np.ndarray:
    return np.ones((len(texts), 4))


def group_predictor() -> ConvexSuccessPredictor:
    return ConvexSuccessPredictor(
        "ngram+minilm+group", ConvexConfig(features="ngram+minilm+group", c=30.0), fake_encoder
    )


def consensus_data(n: int, seed: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Prefix texts with random words (nothing in their n-grams predicts success) whose siblings in the same state
    mostly succeeded (rows with a high same_state_success) or mostly failed."""
    rng = np.random.default_rng(seed)
    texts, rows, y = [], [], []
    for i in range(n):
        good = bool(rng.random() < 0.5)
        same = rng.uniform(0.3, 0.8)
        inside = same * (0.9 if good else 0.1)
        rows.append([same, inside, inside + rng.uniform(0.0, 1.0 - same)])  # outside successes <= 1 - same
        word = "".join(rng.choice(list("abcdefgh"), 12))
        texts.append(f"[PROMPT]\n{word} {seed} {i}\n[TURN 1]\nsame")
        y.append(float(rng.random() < (0.9 if good else 0.1)))
    return texts, np.asarray(rows), np.asarray(y)


def test_group_predictor_learns_from_the_siblings_where_the_text_cannot() -> None:
    train, rows, y = consensus_data(200, 0)
    test, test_rows, _ = consensus_data(100, 1)
    pred = group_predictor()
    pred.register_group(train + test, np.r_[rows, test_rows])
    pred.update(train, y)
    v = pred.predict(test)
    good = test_rows[:, 1] > 0.5 * test_rows[:, 0]
    assert v[good].mean() > 0.7 and v[~good].mean() < 0.3
    text_only = ConvexSuccessPredictor(
        "ngram+minilm", ConvexConfig(features="ngram+minilm", c=30.0), fake_encoder
    )
    text_only.update(train, y)
    w = text_only.predict(test)
    assert abs(w[good].mean() - w[~good].mean()) < 0.15


def test_group_predictor_refuses_unregistered_prefixes_and_round_trips_its_rows() -> None:
    train, rows, y = consensus_data(40, 2)
    pred = group_predictor()
    with pytest.raises(ValueError, match="register_group"):
        pred.update(train, y)
    assert pred.predict(["[PROMPT]\nno siblings at depth 0\n"]).shape == (1,)  # prompt texts need no row
    with pytest.raises(ValueError, match="shape"):
        pred.register_group(train, rows[:, :2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pred.register_group(train[:1], [[0.5, 2.0, 0.1]])
    with pytest.raises(ValueError, match="must not exceed"):
        pred.register_group(train[:1], [[0.5, 0.4, 0.3]])  # more successes in the state than among all others
    pred.register_group(train, rows)
    pred.update(train, y)
    state = pred.state_dict()
    np.testing.assert_allclose(state["batches"][0]["groups"], rows)
    again = group_predictor()
    again.load_state_dict(state)  # the rows come back with the batch: no tree needed to resume
    unseen, unseen_rows, _ = consensus_data(8, 9)  # no kept outcome: the restored head and features decide
    for p in (pred, again):
        p.register_group(unseen, unseen_rows)
    np.testing.assert_allclose(again.predict(unseen), pred.predict(unseen), rtol=1e-12)
    assert np.ptp(pred.predict(unseen)) > 0.1  # the head reads the rows: a lost head would not pass
    del state["batches"][0]["groups"]
    with pytest.raises(ValueError, match="groups"):
        group_predictor().load_state_dict(state)
    text_only = ConvexSuccessPredictor("ngram", ConvexConfig(features="ngram"))
    text_only.register_group(train, rows)  # a no-op: drivers may always call it
    text_only.update(train, y)


def test_replay_allocator_registers_each_anchors_consensus_before_scoring() -> None:
    import asyncio

    from trace_rl.allocation import METHODS
    from trace_rl.predictor import serialize_anchor
    from trace_rl.train.prefixes import prefix_budget, replay_allocator
    from trace_rl.types import Anchor, Task

    tree, (a, b, _c, d) = four_roots()
    anchors = [
        Anchor(int(n), int(tree.depth[n]), float(r)) for n, r in [(a[0], 1.0), (b[1], 0.0), (d[0], 0.0)]
    ]
    pred = group_predictor()
    method = METHODS["trace"]
    budget, _ = prefix_budget(4, 0.5, method=method, accounting="paper")
    alloc = replay_allocator(method, pred, replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0))
    asyncio.run(alloc(Task(id="p", env="x", prompt="p"), tree, anchors, [None] * len(anchors), budget))
    for anchor in anchors:
        text = serialize_anchor(
            "p", [tree.turns[int(y)] for y in tree.path_to(anchor.node)[1:]], max_chars=2048
        )
        np.testing.assert_allclose(
            pred.blocks["group"].registered[text], sibling_consensus(tree, [anchor.node])[0]
        )


def _smoke_trainer(tmp_path, predictor: str, *extra: str):  # type: ignore[no-untyped-def]
    from trace_rl.train.config import load_config
    from trace_rl.train.run import Trainer

    overrides = [f"predictor.name={predictor}", "predictor.updates=8", "predictor.batch_size=32", *extra]
    cfg = load_config(preset="smoke", overrides=[*overrides, "steps=2", "eval_every=0"])
    t = Trainer(cfg, tmp_path / "run", log=lambda s: None)
    t.setup()
    t.run(progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return t, records


def assert_rows_kept(predictor: ConvexSuccessPredictor) -> None:
    """Every kept update holds one full sibling-consensus row per text, zeros for prompt texts, some prefixes."""
    for batch in predictor._batches:
        assert "groups" in batch.kept and batch.kept["groups"].shape == (
            len(batch.texts),
            len(GROUP_FEATURES),
        )
        prefix = np.array(["[TURN 1]" in text for text in batch.texts])
        assert (
            prefix.any() and (batch.kept["groups"][~prefix] == 0).all()
        )  # prompt texts: zeros by definition


def test_trainer_registers_the_consensus_of_every_node_it_trains_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t, records = _smoke_trainer(tmp_path, "ngram+minilm+group")
    assert [r["allocation"] for r in records] == ["treepo", "trace"]  # step 2 scored anchors with the rows
    assert [r["state_evidence"] for r in records] == [0.0, 0.0]
    assert_rows_kept(t.predictor)


def test_trainer_applies_state_evidence_where_the_prefix_stage_uses_the_predictor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    t, records = _smoke_trainer(tmp_path, "ngram", "budget.state_evidence=true")
    assert t.parts.spec.prefix.state_evidence
    # recorded where it applied: the configured trace's prefix stage (step 2, the predictor warm), not the
    # cold-start fallback of step 1 (random anchors)
    assert [r["allocation"] for r in records] == ["treepo", "trace"]
    assert [r["state_evidence"] for r in records] == [0.0, 1.0]


def test_same_state_outcomes_are_the_other_roots_in_the_state_and_join_the_anchor_evidence() -> None:
    from trace_rl.train.prefixes import anchor_evidence
    from trace_rl.types import Anchor

    tree, (a, b, c, d) = four_roots((1.0, 0.0, 1.0, 0.0))
    s, n = same_state_outcomes(tree, [0, a[0], a[1], b[1], c[1], d[0]])
    np.testing.assert_allclose(n, [0, 2, 1, 1, 0, 0])  # A@1: B, C; A@2: B; B@2: A; C@2 and D@1 alone
    np.testing.assert_allclose(s, [0, 1, 0, 1, 0, 0])
    anchors = [Anchor(int(a[0]), 1, 1.0), Anchor(int(b[1]), 2, 0.0)]
    s0, n0 = anchor_evidence(tree, anchors)  # the one rollout through each anchor
    np.testing.assert_allclose([s0, n0], [[1, 0], [1, 1]])
    s1, n1 = anchor_evidence(tree, anchors, same_state=True)
    np.testing.assert_allclose([s1, n1], [[2, 1], [3, 2]])


class RecordingPredictor:
    """Estimates 0.2 everywhere; ``posterior`` records its evidence and returns (s + 1) / (n + 5) (a Beta prior of
    mean 0.2 and strength 5)."""

    is_warm = True
    max_chars = 2048
    capabilities = frozenset({Capability.POSTERIOR})

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, np.ndarray]] = []

    def predict(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), 0.2)

    def posterior(self, texts: list[str], successes: np.ndarray, trials: np.ndarray) -> np.ndarray:
        self.calls.append((np.asarray(successes), np.asarray(trials)))
        return (np.asarray(successes) + 1.0) / (np.asarray(trials) + 5.0)

    def prior_strength(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), 5.0)


def test_state_evidence_values_anchors_by_the_posterior_given_their_state() -> None:
    import asyncio

    from trace_rl.allocation import METHODS
    from trace_rl.train.prefixes import prefix_budget, replay_allocator
    from trace_rl.types import Anchor, Task

    tree, (a, b, _c, d) = four_roots((1.0, 0.0, 1.0, 0.0))
    anchors = [
        Anchor(int(n), int(tree.depth[n]), float(r)) for n, r in [(a[0], 1.0), (b[1], 0.0), (d[0], 0.0)]
    ]
    method = METHODS["trace"]
    budget, _ = prefix_budget(4, 0.5, method=method, accounting="paper")
    for on, expected in ((False, None), (True, ([2, 1, 0], [3, 2, 1]))):
        pred = RecordingPredictor()
        alloc = replay_allocator(
            method, pred, replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0), state_evidence=on
        )
        choice = asyncio.run(alloc(Task(id="p", env="x", prompt="p"), tree, anchors, [None] * 3, budget))
        if expected is None:  # trace without the setting: the predictor's estimate alone
            assert pred.calls == [] and np.allclose(choice.values, 0.2)
        else:
            (call,) = pred.calls
            np.testing.assert_allclose(call, expected)
            np.testing.assert_allclose(
                choice.values, (np.array(expected[0]) + 1) / (np.array(expected[1]) + 5)
            )
    with pytest.raises(ValueError, match="state_evidence"):
        replay_allocator(
            METHODS["branpo"], RecordingPredictor(), replay_cost=0.5, rng_of=None, state_evidence=True
        )


def test_state_evidence_is_a_config_error_where_it_cannot_take_effect() -> None:
    from trace_rl.train.config import load_config
    from trace_rl.train.config_parse import ConfigError

    assert load_config(overrides=["method=trace", "budget.state_evidence=true"]).budget.state_evidence
    for method in ("treepo", "branpo", "grpo"):
        with pytest.raises(ConfigError, match=r"budget\.state_evidence"):
            load_config(overrides=[f"method={method}", "budget.state_evidence=true"])


def test_nodes_that_share_a_text_share_a_row_without_each_others_outcomes() -> None:
    """Roots A and B act and are answered identically through turn 2: one predictor text per depth, whose target
    pools both outcomes, so neither outcome may enter that text's row (keys=texts)."""
    tree = RolloutTree.new()
    a = tree.add_rollout(chain("x", "y", ""), 1.0)
    b = tree.add_rollout(chain("x", "y", ""), 0.0)
    c = tree.add_rollout(chain("x", "w", ""), 1.0)
    texts, rows = node_consensus(tree, "p")
    by_text = dict(zip(texts, rows, strict=True))
    assert len(texts) == 7 and len(by_text) == 4  # prompt, "x" (A, B, C), ("x", "y") (A, B), ("x", "w") (C)
    row_xy = by_text[texts[[int(n) for n in np.flatnonzero(~tree.is_leaf())].index(int(a[1]))]]
    np.testing.assert_allclose(row_xy, [0, 0, 1])  # only C is left: another state, solved
    flipped = RolloutTree.new()
    flipped.add_rollout(chain("x", "y", ""), 0.0)  # A's and B's outcomes swapped
    flipped.add_rollout(chain("x", "y", ""), 1.0)
    flipped.add_rollout(chain("x", "w", ""), 1.0)
    np.testing.assert_allclose(node_consensus(flipped, "p")[1], rows)
    # without keys each node counts the other one: the row of A's node holds B's outcome
    np.testing.assert_allclose(sibling_consensus(tree, [a[1]]), [[1 / 2, 0, 1 / 2]])
    with pytest.raises(ValueError, match="keys"):
        sibling_consensus(tree, [a[1], b[1]], keys=["t"])
    del c


def test_group_predictor_and_state_evidence_are_refused_together() -> None:
    from trace_rl.allocation import METHODS
    from trace_rl.train.config import load_config
    from trace_rl.train.config_parse import ConfigError
    from trace_rl.train.prefixes import replay_allocator

    with pytest.raises(ConfigError, match="a second time"):
        load_config(
            overrides=["method=trace", "predictor.name=ngram+minilm+group", "budget.state_evidence=true"]
        )
    with pytest.raises(ValueError, match="a second time"):
        replay_allocator(
            METHODS["trace"], group_predictor(), replay_cost=0.5, rng_of=None, state_evidence=True
        )


def test_a_cold_group_predictor_already_refuses_unregistered_prefixes() -> None:
    pred = group_predictor()
    with pytest.raises(ValueError, match="register_group"):
        pred.predict(["[PROMPT]\np\n[TURN 1]\nunregistered"])
    train, rows, _ = consensus_data(10, 4)
    pred.register_group(train, rows)
    pred.update(train, np.zeros(len(train)))  # one label only: the head is a constant, reads no rows
    assert isinstance(pred._model, float)
    with pytest.raises(ValueError, match="register_group"):
        pred.predict(["[PROMPT]\np\n[TURN 1]\nunregistered"])


def group_prior_predictor() -> ConvexSuccessPredictor:
    return ConvexSuccessPredictor(
        "ngram+minilm+group-prior", ConvexConfig(features="ngram+minilm+group-prior", c=30.0), fake_encoder
    )


def test_prior_columns_drop_the_outcomes_of_the_nodes_own_state() -> None:
    tree, (a, _b, c, d) = four_roots()
    rows = sibling_consensus(tree, [a[0], a[1], c[1], d[0]])
    cols = prior_columns(rows)
    assert cols.shape == (4, len(GROUP_PRIOR_FEATURES))
    # A@1: B and C share "x" (2 of 3); outside the state only D, failed. A@2: B shares; C (solved) and D outside.
    # C@2 alone: the others (A solved, B, D) are all outside. D@1 alone: A, B, C outside, 2 of 3 solved.
    np.testing.assert_allclose(cols, [[2 / 3, 0], [1 / 3, 1 / 3], [0, 1 / 3], [0, 2 / 3]])
    flipped, (a2, _, _, _) = four_roots((1.0, 1.0, 1.0, 0.0))  # B, in A's state at depths 1 and 2, now solved
    np.testing.assert_allclose(prior_columns(sibling_consensus(flipped, a2[:2])), cols[:2])
    assert not np.allclose(sibling_consensus(flipped, a2[:2]), rows[:2])  # the full rows do see it
    with pytest.raises(ValueError, match="shape"):
        prior_columns(rows[:, :2])


def test_group_prior_predictor_reads_no_outcome_of_the_state_and_stores_the_full_rows() -> None:
    train, rows, y = consensus_data(120, 3)
    pred = group_prior_predictor()
    pred.register_group(train, rows)
    pred.update(train, y)
    np.testing.assert_allclose(pred._batches[0].kept["groups"], rows)  # the registered rows, not the columns
    test = [f"[PROMPT]\nunseen {i}\n[TURN 1]\nsame" for i in range(3)]
    a = np.array([[0.5, 0.25, 0.5], [0.3, 0.0, 0.4], [0.6, 0.6, 0.8]])
    pred.register_group(test, a)
    first = pred.predict(test)
    inside = np.array([0.5, 0.3, 0.1])  # other successes inside the state, the outside ones unchanged
    pred.register_group(test, np.c_[a[:, 0], inside, a[:, 2] - a[:, 1] + inside])
    np.testing.assert_allclose(pred.predict(test), first, rtol=1e-12)  # the state's outcomes do not move it
    pred.register_group(test, a + np.array([0.0, 0.0, 0.2]))
    assert not np.allclose(pred.predict(test), first)  # successes outside the state do
    again = group_prior_predictor()
    again.load_state_dict(pred.state_dict())
    again.register_group(test, a)
    pred.register_group(test, a)
    np.testing.assert_allclose(
        again.predict(test), first, rtol=1e-12
    )  # unseen texts: the restored head decides
    assert np.ptp(first) > 0.05  # ... and it reads the rows


def test_group_prior_predictor_goes_with_state_evidence(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from trace_rl.allocation import METHODS
    from trace_rl.train.prefixes import replay_allocator

    replay_allocator(  # no ValueError: its prior leaves the state's outcomes to the evidence
        METHODS["trace"], group_prior_predictor(), replay_cost=0.5, rng_of=None, state_evidence=True
    )
    renamed = ConvexSuccessPredictor("mine", ConvexConfig(features="ngram+minilm+group"), fake_encoder)
    with pytest.raises(ValueError, match="a second time"):  # decided by the features, not the name
        replay_allocator(METHODS["trace"], renamed, replay_cost=0.5, rng_of=None, state_evidence=True)
    from trace_rl.predictor.convex import build_convex_predictor

    with pytest.raises(ValueError, match="sets the features"):
        build_convex_predictor("ngram+minilm+group-prior", features="ngram+minilm+group")
    t, records = _smoke_trainer(tmp_path, "ngram+minilm+group-prior", "budget.state_evidence=true")
    assert [r["allocation"] for r in records] == ["treepo", "trace"]
    assert [r["state_evidence"] for r in records] == [0.0, 1.0]
    assert_rows_kept(t.predictor)


def test_nodes_of_one_text_in_different_states_keep_every_members_state_out_of_the_prior() -> None:
    """A history cut at max_chars can give two nodes in different states one text (A saw "x" then "y", B saw "z"
    then "y"). Their shared row must count a root in EITHER state as in-state: else the prior's outside successes
    would hold E (in A's state), which A's state evidence adds again."""
    tree = RolloutTree.new()
    a = tree.add_rollout(chain("x", "y", "", who="A"), 0.0)
    b = tree.add_rollout(chain("z", "y", "", who="B"), 0.0)
    tree.add_rollout(chain("x", "y", "", who="E"), 1.0)
    tree.add_rollout(chain("q", "w", "", who="F"), 0.0)
    rows = sibling_consensus(tree, [a[1], b[1]], keys=["cut", "cut"])
    np.testing.assert_allclose(rows, [[1 / 2, 1 / 2, 1 / 2]] * 2)  # C = {E, F}; E is in A's state
    np.testing.assert_allclose(prior_columns(rows), [[1 / 2, 0]] * 2)  # nothing solved outside both states
    s, n = same_state_outcomes(tree, [a[1]])
    np.testing.assert_allclose([s, n], [[1], [1]])  # E enters A's value once: as evidence
    np.testing.assert_allclose(sibling_consensus(tree, [b[1]]), [[0, 0, 1 / 3]])  # alone, B's own state only
