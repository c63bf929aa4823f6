"""The kb_hops regime map (issue 59 item 3): when is a replay worth more than an independent rollout, at equal
generated tokens? Computed offline, with no new generation, from a `benchmarks/kb_oracle.py` outcome table.

Input: the per-prompt records ``kb_oracle.py --out`` writes (``prompts_data``): R root rollouts per prompt (reward,
generated tokens, turns) and, from every anchor (turn prefix) of every root, K Monte Carlo replays (reward and
generated tokens each), the anchor's prefill length and the predictor's V. ``--policy`` collects such a table first
with kb_oracle's own `collect` (same flags); the table must come from a kb_oracle that records tokens.

The map: per question depth d x per-prompt budget B (rollout-equivalents of generated tokens) x arm, a prompt's
tree is built from its kept rollouts and scored in exact expectation over (a) which of its R roots the tree holds
(every subset of size m, a U-statistic over iid roots) and (b) the replays' outcomes (closed form from the K kept
replays of each anchor, below). TreePO's random anchors are averaged over ``--draws`` seeded draws.

Equal-token accounting. A prompt's token budget is T = B * g, g = the mean generated tokens of its R root
rollouts. Arm ``independent`` (GRPO-style) holds m = B roots and no replays (expected tokens exactly B g). The replay
arms hold m = B / 2 roots (at least 1: Tree-GRPO's and the paper's half-and-half split) and spend what the roots
left, T - (their actual generated tokens), on replays, each charged its own generated tokens only: the mean
generated tokens c_j of anchor j's K kept replays (the prefix it re-reads is prefill, reported apart as
``prefill_tokens``, never charged). Costs are quantised to `UNITS` per rollout-equivalent (c_j -> max(1,
round(UNITS c_j / g))); every replay arm's allocator sees these same integer costs:

- ``treepo`` (random-turn replays): `trace_rl.allocation.random_prefixes` (each replay's anchor uniform among those
  still affordable);
- ``branpo`` (tail branching): `trace_rl.allocation.branpo_prefixes` (BranPO's tiers, 1-2 turns before the end);
- ``trace``: `allocate_prefixes` on TRACE's q_j = r_j V_j + (1 - r_j)(1 - V_j), V_j the predictor's value kept in
  the table (the preset's predictor, warm-started on the snapshot's probe, as kb_oracle ran it);
- ``oracle``: `allocate_prefixes` on the true q_j, cross-fitted: q_j estimated on one half of the anchor's K replays,
  the allocation scored on the other half, both ways, averaged (unbiased for what it chose; noise in its q can only
  lower it). ``oracle_insample`` (printed and in the JSON, not an arm of the map) chooses and scores on all K: biased
  up; the true-q ceiling lies between the two, up to sampling error.

Metrics of a tree (r_j: the reward of the rollout anchor j lies on; F_j flips among the n_j scoring replays):

- mixed: P(the tree's leaves hold a success and a failure) = 1 - [roots unanimous] prod_j Q_j(k_j), Q_j(k) the
  estimate of q_j^k: C(n_j - F_j, k) / C(n_j, k) (unbiased, draws without replacement) when k <= n_j, else the
  plug-in (1 - F_j / n_j)^k (counted in ``plugin_share``; by Jensen's inequality it overstates the chance of no
  flip, so an arm with a large plugin_share has its mixed share biased low); ``mixed_per_1k`` = 1000 sum mixed / sum generated tokens
  over a cell's prompts (ratio of sums);
- flips per replay: sum_j k_j F_j / n_j over sum_j k_j (unbiased per replay);
- advantage error (step credit at branch points, unnormalised): at every node of the tree with >= 2 continuations,
  the estimated advantage of the ORIGINAL continuation's first step, A-hat = r - mean(outcomes of that node's
  continuations, the original included), against the true value difference Delta = s(c) - s(a), where a is the
  branch node, c its original child, and s the Monte Carlo success (K replays; s(prompt) = mean over the R roots of
  s(depth-1 anchor), s(leaf) = its reward). For the prompt's root group (m >= 2) A-hat uses the roots' realised
  rewards; for an anchor with k >= 1 replays, the exact expectation over the replays' outcomes:
  E(A-hat - Delta)^2 = (k (r - s_a) / (k + 1) - Delta)^2 + k s_a (1 - s_a) / (k + 1)^2. ``adv_rmse`` = sqrt of the
  mean over a cell's branch points (each counts once). This is GRPO's / TreeRPO's numerator with a one-level mean
  baseline (no std division, no deeper replays folded into V-hat(c)): the part of the estimator a scale cannot fix.

Uncertainty: standard errors from a bootstrap over the cell's prompts (``--boot`` resamples, seeded), paired
between arms for ``*_minus_independent``; the truth itself carries Monte Carlo error (about 0.5 / sqrt(K) per s).

    python benchmarks/kb_regime.py --data outcomes.json[.gz] [more.json ...] [--budgets 2 4 8] [--depths 2 3 4]
        [--draws 32] [--boot 1000] [--seed 0] [--json-out map.json] [--plot map.png]
    python benchmarks/kb_regime.py --policy runs/kb_hops/sft/policy --collect-out outcomes.json [kb_oracle flags]

Prints a table (one line per depth x budget x arm, ``oracle_insample`` included), then one JSON line last: ``cells`` (one per depth x budget x arm: prompts, mixed,
mixed_per_1k, generated_tokens, prefill_tokens, replays, flips_per_replay, adv_rmse, plugin_share, each with
``*_se``, and ``mixed_per_1k_minus_independent`` with its SE) and ``prompts_by_depth``.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ARMS = ("independent", "treepo", "branpo", "trace", "oracle")
#: The oracle's variants: (the replays whose q it allocates on, the replays that score it) per fold. ``oracle``:
#: 2-fold cross-fitting (choose on one half, score on the other, both ways, averaged: unbiased for its allocation
#: with noisy q); ``oracle_insample``: chooses and scores on all K (biased up: a reference, not an arm of the table).
ORACLE_FOLDS = {"oracle": (("first", "second"), ("second", "first")), "oracle_insample": (("all", "all"),)}
UNITS = 64  # integer cost units per rollout-equivalent of generated tokens
SUMS = (
    "mixed",
    "generated_tokens",
    "prefill_tokens",
    "replays",
    "flips",
    "adv_sq",
    "adv_n",
    "plugin",
    "terms",
)


@dataclass(frozen=True)
class Prompt:
    """One prompt's kept outcome table (R roots, J anchors, K_j replays from anchor j).

    Attributes:
        depth: the question's depth d.
        roots: float64 (R,) root rewards in {0, 1}. root_tokens: float64 (R,) generated tokens of each root.
        root_turns: int64 (R,) turns of each root.
        rollout: int64 (J,) the root each anchor lies on. anchor_depth: int64 (J,) turns in its prefix (>= 1).
        value: float64 (J,) the predictor's V_j. prefix_tokens: float64 (J,) the prefix a replay re-reads.
        outcomes: J arrays (K_j,) of replay rewards in {0, 1}. replay_tokens: float64 (J,) mean generated tokens
            of anchor j's replays.
    """

    depth: int
    roots: npt.NDArray[np.float64]
    root_tokens: npt.NDArray[np.float64]
    root_turns: npt.NDArray[np.int64]
    rollout: npt.NDArray[np.int64]
    anchor_depth: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]
    prefix_tokens: npt.NDArray[np.float64]
    outcomes: tuple[npt.NDArray[np.float64], ...]
    replay_tokens: npt.NDArray[np.float64]

    @property
    def reward(self) -> npt.NDArray[np.float64]:
        """float64 (J,): the reward of the rollout each anchor lies on."""
        return self.roots[self.rollout]

    @property
    def success(self) -> npt.NDArray[np.float64]:
        """float64 (J,): each anchor's Monte Carlo success s_j (mean of its K replays)."""
        return np.array([o.mean() for o in self.outcomes])

    def next_value(self) -> npt.NDArray[np.float64]:
        """float64 (J,): s of each anchor's child on its root rollout (the next anchor, or the leaf's reward)."""
        s = self.success
        out = self.reward.copy()
        where = {
            (int(r), int(d)): j for j, (r, d) in enumerate(zip(self.rollout, self.anchor_depth, strict=True))
        }
        for j, (r, d) in enumerate(zip(self.rollout, self.anchor_depth, strict=True)):
            nxt = where.get((int(r), int(d) + 1))
            if nxt is not None:
                out[j] = s[nxt]
        return out

    def first_values(self) -> npt.NDArray[np.float64]:
        """float64 (R,): s of each root's first child (its depth-1 anchor, or its reward for a one-turn root)."""
        out = self.roots.copy()
        s = self.success
        for j in np.flatnonzero(self.anchor_depth == 1):
            out[self.rollout[j]] = s[j]
        return out


def _binary(x: npt.NDArray[np.float64], what: str) -> npt.NDArray[np.float64]:
    if x.ndim != 1 or not np.all(np.isin(x, (0.0, 1.0))):
        raise ValueError(f"{what} must be a list of binary rewards (0 or 1)")
    return x


def load_prompts(records: Iterable[dict[str, Any]]) -> list[Prompt]:
    """`Prompt` tables from kb_oracle's per-prompt records (``prompts_data``).

    Raises:
        ValueError: a record lacks a field this map needs (a table written before kb_oracle recorded tokens),
            rewards that are not binary, lengths that disagree, an anchor without replays or on no root, or no
            records at all.
    """
    out = []
    for i, p in enumerate(records):
        try:
            anchors = p["anchors"]
            roots = _binary(np.asarray(p["roots"], np.float64), f"prompt {i}: roots")
            root_tokens = np.asarray(p["root_tokens"], np.float64)
            root_turns = np.asarray(p["root_turns"], np.int64)
            rollout = np.asarray([a["rollout"] for a in anchors], np.int64)
            outcomes = tuple(
                _binary(np.asarray(a["replays"], np.float64), f"prompt {i}: replays") for a in anchors
            )
            spent = [np.asarray(a["replay_tokens"], np.float64) for a in anchors]
            prompt = Prompt(
                depth=int(p["question_depth"]),
                roots=roots,
                root_tokens=root_tokens,
                root_turns=root_turns,
                rollout=rollout,
                anchor_depth=np.asarray([a["depth"] for a in anchors], np.int64),
                value=np.asarray([a["value"] for a in anchors], np.float64),
                prefix_tokens=np.asarray([a["prefix_tokens"] for a in anchors], np.float64),
                outcomes=outcomes,
                replay_tokens=np.array([t.mean() if t.size else np.nan for t in spent]),
            )
        except KeyError as e:
            raise ValueError(
                f"prompt {i} has no {e.args[0]!r}: the map needs a table from kb_oracle.py with token counts"
            ) from None
        if roots.size == 0 or root_tokens.shape != roots.shape or root_turns.shape != roots.shape:
            raise ValueError(
                f"prompt {i}: roots, root_tokens and root_turns must be non-empty and of one length"
            )
        if rollout.size and (rollout.min() < 0 or rollout.max() >= roots.size):
            raise ValueError(f"prompt {i}: an anchor lies on no root rollout (rollout index out of range)")
        if any(o.size < 2 or t.shape != o.shape for o, t in zip(outcomes, spent, strict=True)):
            raise ValueError(f"prompt {i}: every anchor needs >= 2 replays, each with its generated tokens")
        if not np.all(root_tokens > 0) or not np.all(np.isfinite(prompt.value)):
            raise ValueError(f"prompt {i}: root tokens must be positive and values finite")
        out.append(prompt)
    if not out:
        raise ValueError("no prompts in the table")
    return out


def power_estimate(flipped: int, trials: int, k: int) -> tuple[float, bool]:
    """(estimate of q^k, whether it is the plug-in) from ``flipped`` flips in ``trials`` replays: C(n - F, k) /
    C(n, k) (unbiased) when k <= n, else (1 - F / n)^k.

    Raises:
        ValueError: k < 0, trials < 1, or flipped outside 0..trials.
    """
    if k < 0 or trials < 1 or not 0 <= flipped <= trials:
        raise ValueError(f"need k >= 0, trials >= 1, 0 <= flipped <= trials; got {k}, {trials}, {flipped}")
    if k <= trials:
        return float(_oracle_module().unbiased_power(flipped, trials, k)), False
    return (1.0 - flipped / trials) ** k, True


def independent_mixed(successes: int, trials: int, m: int) -> float:
    """Unbiased estimate of 1 - p^m - (1 - p)^m (m independent rollouts hold both outcomes) from ``successes`` of
    ``trials`` iid rollouts: the share of m-subsets that are mixed, 1 - [C(S, m) + C(n - S, m)] / C(n, m).

    Raises:
        ValueError: m > trials (no unbiased estimate) or m < 1.
    """
    if not 1 <= m <= trials or not 0 <= successes <= trials:
        raise ValueError(
            f"need 1 <= m <= trials and 0 <= successes <= trials; got {m}, {trials}, {successes}"
        )
    return 1.0 - (comb(successes, m) + comb(trials - successes, m)) / comb(trials, m)


def token_units(tokens: npt.ArrayLike, per_rollout: float) -> npt.NDArray[np.int64]:
    """Integer cost units of generated tokens: max(1, round(`UNITS` tokens / per_rollout)).

    Raises:
        ValueError: per_rollout <= 0 or a negative token count.
    """
    t = np.asarray(tokens, np.float64)
    if per_rollout <= 0 or np.any(t < 0):
        raise ValueError("token counts must be >= 0 and the rollout size > 0")
    return np.maximum(1, np.rint(UNITS * t / per_rollout)).astype(np.int64)


def roots_for(arm: str, budget: int) -> int:
    """m: root rollouts of a tree of ``arm`` at ``budget`` rollout-equivalents (module doc)."""
    if arm not in (*ARMS, *ORACLE_FOLDS) or budget < 1:
        raise ValueError(f"unknown arm {arm!r} or budget {budget} < 1")
    return budget if arm == "independent" else max(1, budget // 2)


Allocator = Callable[
    [Prompt, npt.NDArray[np.int64], npt.NDArray[np.int64], int, np.random.Generator], np.ndarray
]


def _allocator(arm: str) -> Allocator:
    """k over the anchors ``idx`` of the tree's roots ``subset`` (module doc), given integer costs and budget."""
    from trace_rl.allocation import (
        TailAnchors,
        allocate_prefixes,
        branpo_prefixes,
        random_prefixes,
        repeat_probability,
    )

    def trace(
        p: Prompt, idx: np.ndarray, cost: np.ndarray, budget: int, rng: np.random.Generator
    ) -> np.ndarray:
        q = repeat_probability(p.reward[idx], np.clip(p.value[idx], 0.0, 1.0))
        return allocate_prefixes(q, budget, cost=cost)

    def treepo(
        p: Prompt, idx: np.ndarray, cost: np.ndarray, budget: int, rng: np.random.Generator
    ) -> np.ndarray:
        return random_prefixes(np.zeros(idx.size), budget, rng, cost)

    def branpo(
        p: Prompt, idx: np.ndarray, cost: np.ndarray, budget: int, rng: np.random.Generator
    ) -> np.ndarray:
        subset = np.unique(p.rollout[idx]) if idx.size else np.zeros(0, np.int64)
        local = np.searchsorted(subset, p.rollout[idx])
        tails = TailAnchors(
            rollout=local.astype(np.int64),
            from_end=(p.root_turns[p.rollout[idx]] - p.anchor_depth[idx]).astype(np.int64),
            reward=p.roots[subset],
            turns=p.root_turns[subset].astype(np.int64),
        )
        return branpo_prefixes(tails, budget, rng, cost)

    return {"trace": trace, "treepo": treepo, "branpo": branpo}[arm]


def oracle_allocation(
    p: Prompt, idx: npt.NDArray[np.int64], cost: npt.NDArray[np.int64], budget: int, part: str
) -> npt.NDArray[np.int64]:
    """`allocate_prefixes` on the Monte Carlo q_j = 1 - F_j / n of the ``part`` ("first", "second", "all") of each
    anchor's replays."""
    from trace_rl.allocation import allocate_prefixes

    q = [
        1.0 - _flips(_part(p.outcomes[j], part), float(p.reward[j])) / _part(p.outcomes[j], part).size
        for j in idx
    ]
    return allocate_prefixes(np.asarray(q, np.float64), budget, cost=cost)


def _part(outcomes: npt.NDArray[np.float64], part: str) -> npt.NDArray[np.float64]:
    half = outcomes.size // 2
    return {"all": outcomes, "first": outcomes[:half], "second": outcomes[half:]}[part]


def _flips(outcomes: npt.NDArray[np.float64], reward: float) -> int:
    return int(_oracle_module().flips(outcomes.tolist(), reward))


def tree_sums(
    p: Prompt,
    subset: Sequence[int],
    k: npt.NDArray[np.int64],
    idx: npt.NDArray[np.int64],
    *,
    score: str = "all",
) -> dict[str, float]:
    """The metrics (module doc) of one tree: the roots ``subset`` of ``p`` and k[i] replays from anchor idx[i], in
    exact expectation over the replays' outcomes, estimated from the ``score`` part ("all", "first", "second") of
    each anchor's replays (an oracle's allocation is scored on the part it did not choose on)."""
    roots = p.roots[list(subset)]
    unanimous = bool(np.all(roots == roots[0]))
    unmixed = 1.0 if unanimous else 0.0
    flips = plugin = terms = 0.0
    s_all, nxt = p.success, p.next_value()
    adv_sq, adv_n = 0.0, 0.0
    if len(subset) >= 2:  # the prompt's root group
        base = float(np.mean(p.first_values()))
        first = p.first_values()[list(subset)]
        a_hat = roots - roots.mean()
        adv_sq += float(np.sum((a_hat - (first - base)) ** 2))
        adv_n += len(subset)
    for j, kj in zip(idx, k, strict=True):
        if kj <= 0:
            continue
        o = p.outcomes[j]
        part = _part(o, score)
        f = _flips(part, float(p.reward[j]))
        flips += kj * f / part.size
        if unanimous:
            est, plug = power_estimate(f, part.size, int(kj))
            unmixed *= est
            plugin += plug
            terms += 1
        r, s, d = float(p.reward[j]), float(s_all[j]), float(nxt[j] - s_all[j])
        adv_sq += (kj * (r - s) / (kj + 1) - d) ** 2 + kj * s * (1 - s) / (kj + 1) ** 2
        adv_n += 1
    return {
        "mixed": 1.0 - unmixed,
        "generated_tokens": float(p.root_tokens[list(subset)].sum() + np.sum(k * p.replay_tokens[idx])),
        "prefill_tokens": float(np.sum(k * p.prefix_tokens[idx])),
        "replays": float(np.sum(k)),
        "flips": flips,
        "adv_sq": adv_sq,
        "adv_n": adv_n,
        "plugin": plugin,
        "terms": terms,
    }


def prompt_sums(p: Prompt, arm: str, budget: int, *, draws: int = 32, seed: int = 0) -> dict[str, float]:
    """One prompt's expected tree metrics for ``arm`` at ``budget``: the mean of `tree_sums` over every m-subset
    of its roots (and ``draws`` seeded draws of TreePO's random anchors).

    Raises:
        ValueError: the arm needs more roots than the table holds (m > R).
    """
    m = roots_for(arm, budget)
    big_r = p.roots.size
    if m > big_r:
        raise ValueError(f"{arm} at budget {budget} needs {m} roots; the table holds {big_r} per prompt")
    per = float(p.root_tokens.mean())
    rng = np.random.default_rng(seed)
    acc = dict.fromkeys(SUMS, 0.0)
    n = 0
    for subset in combinations(range(big_r), m):
        idx = np.flatnonzero(np.isin(p.rollout, subset))
        if arm == "independent":
            reps = [(np.zeros(idx.size, np.int64), "all")]
        else:
            cost = token_units(p.replay_tokens[idx], per)
            left = int(max(0, UNITS * budget - int(token_units(p.root_tokens[list(subset)].sum(), per))))
            if arm in ORACLE_FOLDS:
                reps = [(oracle_allocation(p, idx, cost, left, c), sc) for c, sc in ORACLE_FOLDS[arm]]
            else:
                alloc = _allocator(arm)
                times = draws if arm == "treepo" else 1
                reps = [(np.asarray(alloc(p, idx, cost, left, rng), np.int64), "all") for _ in range(times)]
        for k, score in reps:
            for key, v in tree_sums(p, subset, k, idx, score=score).items():
                acc[key] += v
            n += 1
    return {key: v / n for key, v in acc.items()}


def _cell_stats(rows: list[dict[str, float]]) -> dict[str, float]:
    total = {key: sum(r[key] for r in rows) for key in SUMS}
    n = len(rows)
    return {
        "mixed": total["mixed"] / n,
        "mixed_per_1k": 1000 * total["mixed"] / total["generated_tokens"],
        "generated_tokens": total["generated_tokens"] / n,
        "prefill_tokens": total["prefill_tokens"] / n,
        "replays": total["replays"] / n,
        "flips_per_replay": total["flips"] / total["replays"] if total["replays"] > 0 else float("nan"),
        "adv_rmse": float(np.sqrt(total["adv_sq"] / total["adv_n"])) if total["adv_n"] > 0 else float("nan"),
        "plugin_share": total["plugin"] / total["terms"] if total["terms"] > 0 else 0.0,
    }


def cell(
    rows: dict[str, list[dict[str, float]]], *, boot: int = 1000, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Per arm, `_cell_stats` over a cell's prompts (``rows[arm][i]``: prompt i's `prompt_sums`), with bootstrap
    standard errors over prompts (the same resamples for every arm: paired differences to ``independent``)."""
    n = len(next(iter(rows.values())))
    rng = np.random.default_rng(seed)
    picks = [rng.integers(0, n, n) for _ in range(boot)] if n > 1 else []
    out = {}
    for arm, rs in rows.items():
        stats = _cell_stats(rs)
        resampled = [_cell_stats([rs[i] for i in pick]) for pick in picks]
        for key in list(stats):
            vals = np.array([r[key] for r in resampled], np.float64)
            stats[f"{key}_se"] = (
                float(np.nanstd(vals, ddof=1)) if vals.size > 1 and np.isfinite(vals).any() else float("nan")
            )
        if arm != "independent" and "independent" in rows:
            base = rows["independent"]
            stats["mixed_per_1k_minus_independent"] = (
                stats["mixed_per_1k"] - _cell_stats(base)["mixed_per_1k"]
            )
            diffs = [
                _cell_stats([rs[i] for i in pick])["mixed_per_1k"]
                - _cell_stats([base[i] for i in pick])["mixed_per_1k"]
                for pick in picks
            ]
            stats["mixed_per_1k_minus_independent_se"] = (
                float(np.std(diffs, ddof=1)) if len(diffs) > 1 else float("nan")
            )
        stats["prompts"] = float(n)
        out[arm] = stats
    return out


def regime_map(
    prompts: Sequence[Prompt],
    *,
    budgets: Sequence[int] = (2, 4, 8),
    depths: Sequence[int] = (2, 3, 4),
    arms: Sequence[str] = ARMS,
    draws: int = 32,
    boot: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One record per depth x budget x arm with a prompt of that depth: `cell`'s statistics, plus the keys."""
    out = []
    for d in depths:
        mine = [p for p in prompts if p.depth == d]
        if not mine:
            continue
        for b in budgets:
            rows = {
                arm: [prompt_sums(p, arm, b, draws=draws, seed=seed + i) for i, p in enumerate(mine)]
                for arm in arms
            }
            for arm, stats in cell(rows, boot=boot, seed=seed).items():
                out.append({"depth": d, "budget": b, "arm": arm, **stats})
    return out


@cache
def _oracle_module() -> Any:
    """benchmarks/kb_oracle.py as a module (its collection, `unbiased_power`, `flips`, `strict_json`)."""
    spec = importlib.util.spec_from_file_location("kb_oracle_bench", Path(__file__).parent / "kb_oracle.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_table(path: Path) -> list[dict[str, Any]]:
    """The per-prompt records of a kb_oracle ``--out`` file (JSON, optionally gzipped)."""
    raw = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
    data = json.loads(raw)
    if "prompts_data" not in data:
        raise ValueError(f"{path} holds no prompts_data: not a kb_oracle.py --out file")
    return list(data["prompts_data"])


def format_table(cells: Sequence[dict[str, Any]]) -> str:
    """A readable table: one line per depth x budget x arm."""
    lines = [
        f"{'d':>2} {'B':>2} {'arm':<11} {'n':>3} {'mixed':>6} {'mixed/1k tok':>14} {'vs indep':>15} "
        f"{'tokens':>6} {'prefill':>7} {'replays':>7} {'flips/replay':>13} {'adv rmse':>13}"
    ]
    for c in cells:
        diff = (
            f"{c['mixed_per_1k_minus_independent']:+.2f}+-{c['mixed_per_1k_minus_independent_se']:.2f}"
            if "mixed_per_1k_minus_independent" in c
            else ""
        )
        flips = (
            ""
            if not np.isfinite(c["flips_per_replay"])
            else f"{c['flips_per_replay']:.3f}+-{c['flips_per_replay_se']:.3f}"
        )
        lines.append(
            f"{c['depth']:>2} {c['budget']:>2} {c['arm']:<11} {int(c['prompts']):>3} {c['mixed']:>6.3f} "
            f"{c['mixed_per_1k']:>7.3f}+-{c['mixed_per_1k_se']:.3f} {diff:>15} {c['generated_tokens']:>6.0f} "
            f"{c['prefill_tokens']:>7.0f} {c['replays']:>7.1f} {flips:>13} "
            f"{c['adv_rmse']:.3f}+-{c['adv_rmse_se']:.3f}"
        )
    return "\n".join(lines)


def plot(cells: Sequence[dict[str, Any]], path: Path) -> None:
    """Mixed groups per 1k generated tokens against question depth, one panel per budget, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = sorted({c["budget"] for c in cells})
    fig, axes = plt.subplots(1, len(budgets), figsize=(4 * len(budgets), 3.4), sharey=True, squeeze=False)
    for ax, b in zip(axes[0], budgets, strict=True):
        for i, arm in enumerate(ARMS):
            mine = sorted(
                (c for c in cells if c["budget"] == b and c["arm"] == arm), key=lambda c: c["depth"]
            )
            if mine:
                x = np.array([c["depth"] for c in mine]) + (i - 2) * 0.06
                ax.errorbar(x, [c["mixed_per_1k"] for c in mine], yerr=[c["mixed_per_1k_se"] for c in mine],
                            marker="o", capsize=2, label=arm)  # fmt: skip
        ax.set_title(f"budget {b} rollout-equivalents per prompt")
        ax.set_xlabel("question depth")
        ax.set_xticks(sorted({c["depth"] for c in cells}))
    axes[0][0].set_ylabel("mixed groups per 1k generated tokens")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--data",
        type=Path,
        nargs="+",
        help="kb_oracle.py --out tables (JSON or .json.gz); a task and depth seen twice are kept once",
    )
    src.add_argument("--policy", help="collect a table first with kb_oracle's collection from this snapshot")
    ap.add_argument("--collect-out", type=Path, help="with --policy: where to keep the collected table")
    ap.add_argument("--split", choices=("pool", "held_out"), default="held_out")
    ap.add_argument("--prompts", type=int, default=30)
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--mc", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--preset", default="kb_hops")
    ap.add_argument("--set", action="append", default=[], help="config override for the collection")
    ap.add_argument("--budgets", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--depths", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--draws", type=int, default=32, help="TreePO draws per root subset")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples over prompts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-out", type=Path, help="also write the JSON line here")
    ap.add_argument("--plot", type=Path, help="save the plot here (PNG; needs matplotlib)")
    args = ap.parse_args(argv)
    if args.policy:
        oracle = _oracle_module()
        ns = argparse.Namespace(**vars(args), continuations=0)
        records, _ = oracle.collect(ns)
        if args.collect_out:
            args.collect_out.write_text(json.dumps(oracle.strict_json({"prompts_data": records})))
        source = f"collected: {args.prompts} {args.split} prompts x {args.roots} roots x {args.mc} replays"
    else:
        records, seen = [], set()
        for path in args.data:
            for r in read_table(path):
                key = (r.get("task"), r.get("question_depth"))  # one task id holds one question per depth
                if key not in seen or r.get("task") is None:
                    records.append(r)
                    seen.add(key)
        source = " + ".join(str(x) for x in args.data)
    prompts = load_prompts(records)
    cells = regime_map(
        prompts,
        budgets=args.budgets,
        depths=args.depths,
        arms=(*ARMS, *ORACLE_FOLDS.keys() - {"oracle"}),
        draws=args.draws,
        boot=args.boot,
        seed=args.seed,
    )
    by_depth = {str(d): sum(p.depth == d for p in prompts) for d in sorted({p.depth for p in prompts})}
    print(f"{len(prompts)} prompts from {source}; by question depth {json.dumps(by_depth)}")
    print(format_table(cells))
    if args.plot:
        plot(cells, args.plot)
    summary = {
        "source": source,
        "prompts_by_depth": by_depth,
        "roots_per_prompt": int(min(p.roots.size for p in prompts)),
        "replays_per_anchor": int(min((o.size for p in prompts for o in p.outcomes), default=0)),
        "anchors": int(sum(len(p.outcomes) for p in prompts)),
        "units_per_rollout": UNITS,
        "budgets": args.budgets,
        "arms": list(ARMS),
        "references": sorted(ORACLE_FOLDS.keys() - {"oracle"}),
        "cells": cells,
    }
    line = json.dumps(_oracle_module().strict_json(summary), allow_nan=False)
    if args.json_out:
        args.json_out.write_text(line + "\n")
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
