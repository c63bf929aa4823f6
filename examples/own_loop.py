"""TRACE inside your own training loop: its allocation, trees and advantages around YOUR generate and reward.

Everything trace-rl-specific is the four calls marked (1)-(4); the rest stands in for your code:

- ``generate(prompt, prefix)`` continues an episode from a saved turn prefix and returns the remaining turns
  (your sampler / agent loop; here a tabular softmax policy that picks one of ACTIONS per turn);
- ``reward(prompt, turns)`` scores a finished episode (here 1 when every turn hits the prompt's secret code);
- a success estimate per prompt and per prefix (here running means; trace-rl's is `trace_rl.predictor`);
- the policy-gradient update with the advantages (here REINFORCE on the table; trace-rl's is
  `trace_rl.train.update.policy_update`).

One step (DESIGN.md section 1): (1) `allocate_roots` spends M root rollouts where mixed outcomes are likely;
(2) per prompt, `RolloutTree.anchors` + `repeat_probability` + `allocate_prefixes` spend N replays per root on the
turn prefixes most likely to flip the ending; (3) `treerpo_advantages` scores every turn against its siblings;
(4) `effective_ratio` says how many prompts carried a learning signal. Pure numpy, about a second on one core:

    python examples/own_loop.py --steps 30
"""

from __future__ import annotations

import argparse

import numpy as np

from trace_rl.advantages import treerpo_advantages
from trace_rl.allocation import allocate_prefixes, allocate_roots, repeat_probability
from trace_rl.metrics import effective_ratio
from trace_rl.tree import RolloutTree

PROMPTS, TURNS, ACTIONS = 64, 3, 3  # candidate prompts, turns per episode, choices per turn
POOL, M, N = 16, 32, 2  # candidates scored per step, root rollouts per step, replays per root rollout
MAX_ACTIVE = 8  # distinct prompts per step: floor(M (1 + N/2) / n) of a GRPO baseline with n = 8


class ToyAgent:
    """Stand-in for your model: per prompt and turn, a softmax over ACTIONS; the secret code is action 0."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        # prompts differ in difficulty: some start near the code, some far from it
        self.logits = rng.normal(0.0, 1.5, size=(PROMPTS, TURNS, ACTIONS))

    def probs(self, prompt: int) -> np.ndarray:
        z = np.exp(self.logits[prompt] - self.logits[prompt].max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)  # (TURNS, ACTIONS)

    def generate(self, prompt: int, prefix: list[int]) -> list[int]:
        """The turns after ``prefix`` (a replay restores the prefix's state and samples a fresh future)."""
        p = self.probs(prompt)
        return [int(self.rng.choice(ACTIONS, p=p[t])) for t in range(len(prefix), TURNS)]

    def update(self, prompt: int, turn: int, action: int, advantage: float, lr: float = 0.5) -> None:
        """REINFORCE on one turn: logits += lr * A * grad log pi(action)."""
        grad = -self.probs(prompt)[turn]
        grad[action] += 1.0
        self.logits[prompt, turn] += lr * advantage * grad


def reward(prompt: int, turns: list[int]) -> float:
    """Your verifier: 1 when every turn picked the code (action 0)."""
    return float(all(a == 0 for a in turns))


def run(steps: int, seed: int = 0) -> list[dict[str, float]]:
    """Train ``steps`` TRACE steps; returns one record per step (effective ratio, success, budget spent)."""
    rng = np.random.default_rng(seed)
    agent = ToyAgent(rng)
    seen = np.ones(
        (PROMPTS, TURNS + 1, 2)
    )  # your success estimate: Beta(1, 1) counts per (prompt, prefix depth)
    records = []
    for step in range(1, steps + 1):
        pool = rng.choice(PROMPTS, size=POOL, replace=False)
        v = seen[pool, 0, 0] / seen[pool, 0].sum(axis=1)  # predicted success of each candidate prompt
        m = allocate_roots(v, M, min_rollouts=2, max_rollouts=8, max_active=MAX_ACTIVE)  # (1)
        trees, turn_actions, spent = [], [], 0.0
        for prompt, m_i in zip(pool.tolist(), m.tolist(), strict=True):
            if m_i == 0:
                continue  # skipped this step: all-success or all-failure groups teach nothing
            tree, action = RolloutTree.new(meta={"prompt": prompt}), {}
            for _ in range(m_i):
                turns = agent.generate(prompt, [])
                nodes = tree.add_rollout([None] * len(turns), reward(prompt, turns))
                action.update(zip(nodes.tolist(), turns, strict=True))
            anchors = tree.anchors()  # (2) non-root, non-leaf prefixes of the root rollouts
            if anchors:
                value = np.array([seen[prompt, a.depth, 0] / seen[prompt, a.depth].sum() for a in anchors])
                q = repeat_probability([a.reward for a in anchors], value)  # q = r V + (1 - r)(1 - V)
                k = allocate_prefixes(q, N * m_i)
                for anchor, k_j in zip(anchors, k.tolist(), strict=True):
                    prefix = [action[int(n)] for n in tree.path_to(anchor.node)[1:]]
                    for _ in range(k_j):
                        rest = agent.generate(prompt, prefix)
                        nodes = tree.add_replay(
                            anchor.node, [None] * len(rest), reward(prompt, prefix + rest)
                        )
                        action.update(zip(nodes.tolist(), rest, strict=True))
            spent += m_i + 0.5 * tree.num_replays  # the paper's accounting: a replay costs half a rollout
            trees.append(tree)
            turn_actions.append(action)
        for tree, action in zip(trees, turn_actions, strict=True):
            prompt = int(tree.meta["prompt"])
            advantages = treerpo_advantages(tree)  # (3) node-level, NaN at the root
            for node in range(1, tree.num_nodes):
                agent.update(prompt, int(tree.depth[node]) - 1, action[node], float(advantages[node]))
            targets = tree.value_targets()  # mean leaf reward below each node: your predictor's targets
            for node in range(tree.num_nodes):
                depth = int(tree.depth[node])
                if depth < TURNS:
                    seen[prompt, depth] += (targets[node], 1.0 - targets[node])
        leaves = np.concatenate([t.reward[t.leaves()] for t in trees])
        records.append(
            {
                "step": step,
                "effective_ratio": effective_ratio(trees),  # (4)
                "success_rate": float(leaves.mean()),
                "active_prompts": len(trees),
                "budget_spent": spent,
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for r in run(args.steps, args.seed):
        print(
            f"step {r['step']:3d}  effective ratio {r['effective_ratio']:.2f}  success {r['success_rate']:.2f}  "
            f"active prompts {r['active_prompts']}  budget spent {r['budget_spent']:.1f}"
        )


if __name__ == "__main__":
    main()
