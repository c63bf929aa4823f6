"""benchmarks/kb_oracle.py (issue 59): the Monte Carlo success of every save point, checked on kb_hops worlds where a
scripted policy's success is known in closed form, and the arithmetic of the prefix objectives it reports."""

from __future__ import annotations

import asyncio
import importlib.util
from math import comb
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from trace_rl.allocation import get_method, random_prefixes
from trace_rl.envs import load_tasks
from trace_rl.envs.base import StepResult
from trace_rl.envs.kb_hops import KbHopsEnv, lookup_call_text, task_question
from trace_rl.predictor.capabilities import NO_CAPABILITIES
from trace_rl.rollout.backends import Completion, SamplingParams
from trace_rl.train.prefixes import replay_allocator

_spec = importlib.util.spec_from_file_location(
    "kb_oracle_bench", Path(__file__).parents[2] / "benchmarks" / "kb_oracle.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

GOOD, BAD = 10, 11


class CoinBackend:
    """A policy that takes the right action with probability ``p`` at every turn, independently: each turn samples
    token GOOD with probability p, else BAD, from a generator seeded by the turn's own seed."""

    def __init__(self, p: float) -> None:
        self.p = p

    async def generate(self, prompt_token_ids: Any, sampling: SamplingParams, n: int = 1) -> list[Completion]:
        rng = np.random.default_rng(sampling.seed)
        out = []
        for _ in range(n):
            token = GOOD if rng.random() < self.p else BAD
            out.append(Completion(np.asarray([token], np.int64), np.asarray([-0.5], np.float32), "stop"))
        return out


class CoinCodec:
    """One token per prompt, observation and turn; the turn's text says whether the policy chose right."""

    end_of_turn = 0

    def prompt_ids(self, first: str, tools: Any) -> list[int]:
        return [1]

    def observation_ids(self, obs: str) -> list[int]:
        return [2]

    def turn_text(self, ids: Any, stop_ids: Any = ()) -> str:
        return "good" if int(ids[0]) == GOOD else "bad"


class CoinKbEnv(KbHopsEnv):
    """kb_hops where "good" is the gold turn of the current state (the next lookup on the gold path, or the answer)
    and "bad" a wrong answer: from a save point after t gold lookups of a depth-d question, success is p^(d + 1 - t)."""

    def step(self, assistant_text: str) -> StepResult:
        q = task_question(self.state.task)
        h = int(self.state.extra.get("hops_right", 0))
        if assistant_text == "good":
            text = (
                lookup_call_text(q.path[h], q.relations[h]) if h < q.depth else f"<answer>{q.answer}</answer>"
            )
        else:
            text = "<answer>Nobody</answer>"
        return super().step(text)


class HalfPredictor:
    """A predictor that says 0.5 for every anchor."""

    max_chars = 2048
    capabilities = NO_CAPABILITIES

    def predict(self, texts: list[str]) -> np.ndarray:
        return np.full(len(texts), 0.5)


def run_oracle(p: float, depth: int, *, prompts: int, roots: int, mc: int) -> list[dict[str, Any]]:
    pool = load_tasks("kb_hops", "train", limit=prompts, config={"depths": [depth]})
    allocator = replay_allocator(
        get_method("trace"), HalfPredictor(), replay_cost=0.5, rng_of=lambda t: np.random.default_rng(0)
    )
    return asyncio.run(
        bench.sample(
            pool,
            CoinBackend(p),
            lambda: CoinKbEnv(max_turns=depth + 1),
            CoinCodec(),
            SamplingParams(max_new_tokens=4, temperature=1.0),
            allocator,
            roots=roots,
            mc=mc,
            budget=roots,
            max_turns=depth + 1,
        )
    )


def test_monte_carlo_success_matches_the_closed_form() -> None:
    p, depth, mc = 0.7, 3, 32
    prompts = run_oracle(p, depth, prompts=16, roots=4, mc=mc)
    anchors = [a for r in prompts for a in r["anchors"]]
    assert {a["depth"] for a in anchors} == {
        1,
        2,
        3,
    }  # after 1, 2, 3 gold lookups (a bad turn ends the episode)
    for a in anchors:
        truth = p ** (depth + 1 - a["depth"])
        s, se = bench.mc_success(a["replays"])
        assert len(a["replays"]) == mc and a["hops_right"] == a["depth"]
        assert se == pytest.approx(np.sqrt(s * (1 - s) / mc))
        assert abs(s - truth) < 5 * np.sqrt(truth * (1 - truth) / mc)  # each anchor within 5 true SEs
    for d in (1, 2, 3):  # pooled by depth: within 4 SEs of p^(d_left)
        rewards = [x for a in anchors if a["depth"] == d for x in a["replays"]]
        truth = p ** (depth + 1 - d)
        assert abs(np.mean(rewards) - truth) < 4 * np.sqrt(truth * (1 - truth) / len(rewards))
    roots = [x for r in prompts for x in r["roots"]]
    assert abs(np.mean(roots) - p ** (depth + 1)) < 4 * np.sqrt(p**4 * (1 - p**4) / len(roots))
    summary = bench.summarize(prompts, budget=4)
    for key in ("oracle_objective", "oracle_objective_insample", "trace_objective", "random_objective"):
        assert np.isfinite(summary[key]) and np.isfinite(summary[f"{key}_se"])
    # the true-q optimum beats TRACE's even spread (a constant predictor), which beats TreePO's uniform draws (which
    # can put two replays on one anchor while another gets none)
    assert summary["oracle_objective_insample"] > summary["trace_objective"] > summary["random_objective"]
    assert summary["oracle_minus_random"] == pytest.approx(
        summary["oracle_objective"] - summary["random_objective"]
    )
    truth_by_depth = summary["true_success_by_depth"]
    assert set(truth_by_depth) == {"1", "2", "3"}
    assert summary["mc_se_max"] <= 0.5 / np.sqrt(mc) + 1e-12
    # a failed root first left the path at hop h with probability p^(h-1) (1 - p), h = 1..d+1 (d+1: the answer)
    hops = summary["first_wrong_hop_by_question_depth"][str(depth)]
    assert set(hops) <= {"1", "2", "3", "4"} and hops["1"] > hops.get("4", 0)
    assert summary["overshoot_share_of_failures_by_question_depth"] == {
        "3": 0.0
    }  # a bad turn answers at once
    # a constant predictor ranks nothing: its Spearman is undefined at every depth
    assert all(np.isnan(v) for v in summary["predictor_spearman_by_depth"].values())
    # token counts for the regime map (kb_regime.py): one sampled token per turn; an anchor at depth t re-reads the
    # prompt and t turns (each a sampled token and an observation token) and lies on the root it came from
    for r in prompts:
        assert r["root_tokens"] == r["root_turns"] and r["prompt_tokens"] == 1
        for a in r["anchors"]:
            left = depth + 1 - a["depth"]  # turns a successful continuation takes; a bad turn ends it sooner
            for x, t in zip(a["replays"], a["replay_tokens"], strict=True):
                assert t == left if x else 1 <= t <= left
            assert a["prefix_tokens"] >= 1 + a["depth"] and 0 <= a["rollout"] < len(r["roots"])
            assert r["root_turns"][a["rollout"]] > a["depth"]
    # TRACE's k on the roots-only tree spends the budget of N M = 4 replays
    assert all(sum(a["trace_k"] for a in r["anchors"]) == 4 for r in prompts if r["anchors"])


def test_unbiased_power_and_flip_objective_by_hand() -> None:
    assert bench.unbiased_power(2, 4, 2) == pytest.approx(comb(2, 2) / comb(4, 2))  # 1/6
    assert bench.unbiased_power(0, 4, 3) == 1.0 and bench.unbiased_power(4, 4, 1) == 0.0
    with pytest.raises(ValueError, match="without bias"):
        bench.unbiased_power(0, 2, 3)
    # two anchors: flips 1/4 and 0/4; k = (2, 0): 1 - C(3,2)/C(4,2) = 0.5, and 0
    assert bench.flip_objective(np.array([1, 0]), np.array([4, 4]), np.array([2, 0])) == pytest.approx(0.5)
    assert bench.mc_success([1.0, 0.0, 1.0, 1.0]) == pytest.approx((0.75, np.sqrt(0.75 * 0.25 / 4)))
    with pytest.raises(ValueError, match="at least one replay"):
        bench.mc_success([])
    # an undefined Spearman prints as null: the last line stays strict JSON
    assert bench.strict_json({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": 2}}) == {
        "a": None,
        "b": [1.0, None],
        "c": {"d": 2},
    }


def test_overshoot_is_a_lookup_after_the_last_gold_hop() -> None:
    def turns(*steps: tuple[str, int]) -> list[SimpleNamespace]:
        return [SimpleNamespace(info={"role": role, "hops_right": h}) for role, h in steps]

    past = turns(
        ("tool", 1), ("tool", 2), ("tool", 2), ("user", 2)
    )  # reached 2 of 2, looked up again, answered
    assert bench.overshot(past, 2)
    assert not bench.overshot(turns(("tool", 1), ("tool", 2), ("user", 2)), 2)  # answered (wrongly) at once
    assert not bench.overshot(turns(("tool", 0), ("tool", 1), ("user", 1)), 2)  # never reached the last hop


def test_random_objective_is_the_expectation_over_treepo_draws() -> None:
    flipped, trials, budget = np.array([3, 0, 1]), np.array([6, 6, 6]), 4
    exact = bench.random_objective(flipped, trials, budget)
    rng = np.random.default_rng(0)
    draws = [
        bench.flip_objective(flipped, trials, random_prefixes(np.zeros(3), budget, rng))
        for _ in range(20_000)
    ]
    assert exact == pytest.approx(np.mean(draws), abs=4 * np.std(draws) / np.sqrt(len(draws)))
    with pytest.raises(ValueError, match="exceeds"):
        bench.random_objective(flipped, trials, 7)


def test_oracle_chooses_on_one_half_and_scores_on_the_other() -> None:
    # anchor 0 flips in every replay, anchor 1 never: the oracle puts the whole budget on anchor 0 and scores 1
    anchors = [
        {"depth": 1, "reward": 0.0, "replays": [1.0] * 8, "value": 0.5, "trace_k": 0},
        {"depth": 2, "reward": 0.0, "replays": [0.0] * 8, "value": 0.5, "trace_k": 2},
    ]
    row = bench.tree_objectives(anchors, budget=2)
    assert row["oracle"] == row["oracle_insample"] == 1.0
    assert row["trace"] == 0.0  # TRACE put both replays on the anchor that never flips
    assert row["random"] == pytest.approx(1 - 0.5**2)  # anchor 0 gets at least one of 2 uniform draws
    with pytest.raises(ValueError, match="need at least 10"):
        bench.tree_objectives(anchors, budget=5)
