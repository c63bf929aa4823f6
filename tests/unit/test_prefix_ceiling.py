"""The arithmetic of benchmarks/prefix_ceiling.py (what docs/notebook/results_history.md's prefix-stage ceiling rests on), on
hand-computed trees: P(mixed) = 1 - prod_j (1 - f_j)^k_j, only unanimous trees counted, fresh flip rates from the
other roots."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "prefix_ceiling_bench", Path(__file__).parents[2] / "benchmarks" / "prefix_ceiling.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def anchor(depth: int, reward: float, replays: list[float]) -> dict[str, object]:
    return {"depth": depth, "reward": reward, "replays": replays}


# two failed roots; depth-1 anchors flip 1/2 and 0/2 of the time, the depth-2 anchor never
ALL_FAILED = {
    "task": "a",
    "roots": [0.0, 0.0],
    "anchors": [anchor(1, 0.0, [1.0, 0.0]), anchor(2, 0.0, [0.0, 0.0]), anchor(1, 0.0, [0.0, 0.0])],
}
MIXED = {
    "task": "b",
    "roots": [1.0, 0.0],
    "anchors": [anchor(1, 1.0, [0.0, 0.0]), anchor(1, 0.0, [1.0, 1.0])],
}


def test_allocations_of_one_tree_by_hand() -> None:
    budget = 4  # N = 2 continuations x 2 roots
    got = bench.allocations(ALL_FAILED["anchors"], budget)
    assert got["random"] == pytest.approx(1 - (1 - 1 / 6) ** 4)  # 1 flip in 6 replays, pooled
    # round-robin over the two depth-1 anchors, 2 replays each: drawing both of the first anchor's replays
    # always includes its flip, so the unbiased estimate of P(no flip) there is C(1, 2) / C(2, 2) = 0
    assert got["shallowest"] == pytest.approx(1.0)
    # split halves (1 + 1 replays, so at most 1 replay per anchor): the first replays pick anchor 1 (its flip),
    # the second replays (no flips anywhere) score: 0 for both split allocations
    assert got["trace_split"] == pytest.approx(0.0)
    assert got["best_split"] == pytest.approx(0.0)
    assert got["contrast_split"] == pytest.approx(0.0) and got["contrast_w0_split"] == pytest.approx(0.0)
    # more budget than the shallowest anchors have replays: the rest goes one depth deeper (2 + 2 here), where the
    # depth-2 anchor's flip is then always drawn
    deep = bench.allocations([anchor(1, 0.0, [0.0, 0.0]), anchor(2, 0.0, [1.0, 0.0])], 4)
    assert deep["shallowest"] == pytest.approx(1.0)


def test_contrast_rows_concentrate_where_the_first_half_flipped() -> None:
    """Three anchors of an all-failed tree, 6 replays each (halves of 3): the first halves flip 2, 1, 1 times
    (q = 1/3, 2/3, 2/3), the second halves 1, 0, 0. Budget 3 (at most 3 per anchor): the paper's objective gives
    (1, 1, 1) (increments 2/3, 1/3, 1/3 beat 2/9), as does the contrast objective at weight 1 (value 2.185 against
    2.148 for (2, 1, 0) and 1.926 for (3, 0, 0)); at weight 0 (the tree term alone) all 3 go to the first anchor
    (-log 1/3 > -log 2/3)."""
    anchors = [
        anchor(1, 0.0, [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]),
        anchor(1, 0.0, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        anchor(2, 0.0, [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
    ]
    got = bench.allocations(anchors, 3)
    # (1, 1, 1) on the second halves: P(no flip) = C(2,1)/C(3,1) * 1 * 1 = 2/3
    assert got["trace_split"] == pytest.approx(1 / 3)
    assert got["contrast_split"] == pytest.approx(1 / 3)
    # (3, 0, 0): all three held-out replays of the first anchor, one of which flips: P(no flip) = 0
    assert got["contrast_w0_split"] == pytest.approx(1.0)


def test_p_mixed_is_an_unbiased_estimate() -> None:
    from scipy.stats import binom

    # E over F ~ Binomial(K, f) of C(K - F, k) / C(K, k) is (1 - f)^k for k <= K
    for trials, k, f in ((4, 3, 0.3), (6, 2, 0.05), (2, 2, 0.5)):
        none = [
            1 - bench.p_mixed(np.array([x]), np.array([trials]), np.array([k])) for x in range(trials + 1)
        ]
        expect = sum(binom.pmf(x, trials, f) * p for x, p in enumerate(none))
        assert expect == pytest.approx((1 - f) ** k)
    with pytest.raises(ValueError, match="exceeds the measured replays"):
        bench.p_mixed(np.array([0]), np.array([2]), np.array([3]))
    with pytest.raises(ValueError, match="at least 2 replays"):
        bench.allocations([anchor(1, 0.0, [1.0])], 2)


def test_report_counts_only_unanimous_trees_and_fresh_flips_from_other_roots() -> None:
    out = bench.report([ALL_FAILED, MIXED], continuations=2)
    assert out["unanimous_share"] == pytest.approx(0.5) and out["unanimous_all_failed"] == 1
    assert out["p_mixed_unanimous"]["shallowest"] == pytest.approx(1.0)
    assert out["headroom"]["shallowest"] == pytest.approx(0.5 * (1 - 1 / 6) ** 4)
    depth1 = out["flip_rates_by_depth"][1]
    # depth-1 replays: [1,0], [0,0] (tree a) and [0,0] (flips 2 of 2: reward 1 -> 0), [1,1] (flips 2 of 2)
    assert depth1["replays"] == 8 and depth1["replay"] == pytest.approx(5 / 8)
    # fresh: tree a's other root agrees (0); tree b's other root differs (1) for both anchors
    assert depth1["fresh"] == pytest.approx(4 / 8)
    assert out["flip_rates_by_depth_unanimous"][1]["replay"] == pytest.approx(1 / 4)  # tree a only


def test_collect_replays_every_anchor_with_the_trainers_parts() -> None:
    # smoke preset, untrained tiny policy: the outcomes are all failures, but every anchor of every root
    # rollout gets exactly K replays and each record carries what report() reads
    args = SimpleNamespace(
        policy="tiny",
        preset="smoke",
        prompts=2,
        roots=2,
        replays=2,
        continuations=2,
        seed=0,
        threads=1,
        max_chars=4096,
        set=[],
    )
    prompts = bench.collect(args)
    assert len(prompts) == 2 and all(len(p["roots"]) == 2 for p in prompts)
    assert sum(len(p["anchors"]) for p in prompts) > 0  # a failed first turn is still a save point
    for p in prompts:
        for a in p["anchors"]:
            assert a["depth"] >= 1 and len(a["replays"]) == 2 and a["reward"] in (0.0, 1.0)
            # what benchmarks/prefix_predictor.py reads: the anchor's predictor text and its save point's context
            assert a["text"].startswith(p["text"][:-1]) and f"[TURN {a['depth']}]" in a["text"]
            assert a["prefix_ids"][: len(p["prompt_ids"])] == p["prompt_ids"]
            assert len(a["prefix_ids"]) > len(p["prompt_ids"])
    for p in prompts:  # every anchor lies on one of the recorded root rollouts, with that root's reward
        assert len(p["root_leaves"]) == 2
        reward_of = dict(zip(p["root_leaves"], p["roots"], strict=True))
        assert all(reward_of[a["leaf"]] == a["reward"] for a in p["anchors"])
    out = bench.report(prompts, continuations=2)
    assert out["prompts"] == 2 and 0.0 <= out["unanimous_share"] <= 1.0
    assert len(bench.split_roots(prompts, 1)) == 4


def test_split_roots_keeps_each_roots_own_anchors() -> None:
    # four roots (leaves 3, 6, 9, 12; rewards 0, 0, 1, 0) and one anchor per rollout
    p = {
        "task": "c",
        "roots": [0.0, 0.0, 1.0, 0.0],
        "anchors": [
            {**anchor(1, r, [1.0 - r, r]), "leaf": leaf}
            for leaf, r in ((3, 0.0), (6, 0.0), (9, 1.0), (12, 0.0))
        ],
    }
    for prompt in (p, {**p, "root_leaves": [3, 6, 9, 12]}):  # inferred from the anchors, then recorded
        first, second = bench.split_roots([prompt], 2)
        assert first["roots"] == [0.0, 0.0] and [a["leaf"] for a in first["anchors"]] == [3, 6]
        assert second["roots"] == [1.0, 0.0] and [a["leaf"] for a in second["anchors"]] == [9, 12]
        assert bench.unanimous(first) and not bench.unanimous(second)
        # the 2-root tree's budget is N * 2 replays: report() reads len(roots)
        assert bench.report([first], 2)["unanimous_share"] == 1.0
    with pytest.raises(ValueError, match="is not a divisor"):
        bench.split_roots([p], 3)
    with pytest.raises(ValueError, match="cannot tell"):  # a root without anchors and no recorded leaves
        bench.split_roots([{**p, "anchors": p["anchors"][1:]}], 2)
    with pytest.raises(ValueError, match="matches no root"):  # an anchor whose reward is not its root's
        bench.split_roots(
            [{**p, "root_leaves": [3, 6, 9, 12], "anchors": [{**p["anchors"][2], "leaf": 3}]}], 2
        )


def test_headroom_interval_resamples_prompts_and_brackets_the_headroom() -> None:
    # two prompts, each split into two trees: prompt a's trees are unanimous (both roots failed), prompt b's mixed
    a = {**ALL_FAILED, "roots": [0.0, 0.0, 0.0, 0.0], "root_leaves": [1, 2, 3, 4]}
    a["anchors"] = [{**x, "leaf": leaf} for x, leaf in zip(ALL_FAILED["anchors"], (1, 2, 3), strict=True)]
    a["anchors"].append({**anchor(1, 0.0, [1.0, 1.0]), "leaf": 4})
    b = {**MIXED, "roots": [1.0, 0.0, 1.0, 0.0], "root_leaves": [1, 2, 3, 4]}
    b["anchors"] = [{**x, "leaf": leaf} for x, leaf in zip(MIXED["anchors"], (1, 2), strict=True)]
    trees = bench.split_roots([a, b], 2)
    out = bench.report(trees, continuations=1, bootstrap=500)
    assert out["unanimous_share"] == pytest.approx(0.5)  # a's two trees of four
    for name, (lo, hi) in out["headroom_interval"].items():
        # a resample holds a's trees (headroom 2x a's mean difference) or b's (0) or both (the estimate)
        assert lo <= out["headroom"][name] <= hi
        assert lo == pytest.approx(min(0.0, 2 * out["headroom"][name]), abs=1e-12)
        assert hi == pytest.approx(max(0.0, 2 * out["headroom"][name]), abs=1e-12)
    # one prompt only: every resample is the data itself
    one = bench.report(trees[:2], continuations=1, bootstrap=50)
    for name, (lo, hi) in one["headroom_interval"].items():
        assert lo == pytest.approx(one["headroom"][name]) and hi == pytest.approx(one["headroom"][name])
