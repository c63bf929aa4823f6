"""policy_update moves probability toward rewarded paths and away from failed ones (tiny policy, real loss)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.spec import TraceSpec, UpdateSpec  # noqa: E402
from trace_rl.train.update import policy_update  # noqa: E402
from trace_rl.tree import RolloutTree  # noqa: E402
from trace_rl.types import Turn  # noqa: E402

PROMPT = np.array([5, 17, 42, 99, 7, 3], np.int64)
GOOD = np.array([11, 12, 13, 14], np.int64)
BAD = np.array([21, 22, 23, 24], np.int64)
OBS = np.array([30, 31], np.int64)


def turn(model_ids: np.ndarray, extra: np.ndarray | None = None) -> Turn:
    ids = model_ids if extra is None else np.concatenate([model_ids, extra])
    mask = np.zeros(ids.size, np.int8)
    mask[: model_ids.size] = 1
    return Turn(ids, mask, np.zeros(ids.size, np.float32))


def path_logprob(model, prefix: np.ndarray, ids: np.ndarray) -> float:
    with torch.no_grad():
        full = torch.as_tensor(np.concatenate([prefix, ids]))[None]
        logp = torch.log_softmax(model(input_ids=full).logits[0, :-1].float(), -1)
        tok = full[0, 1:]
        return float(logp[prefix.size - 1 :].gather(-1, tok[prefix.size - 1 :, None]).sum())


def build_tree(model) -> RolloutTree:
    tree = RolloutTree.new(prompt_ids=PROMPT)
    for _ in range(2):
        tree.add_rollout([turn(GOOD, OBS), turn(GOOD)], reward=1.0)
        tree.add_rollout([turn(BAD, OBS), turn(BAD)], reward=0.0)
    # behaviour logprobs = the current model's, so the first minibatch's ratio is exactly 1
    for node in range(1, tree.num_nodes):
        t = tree.turns[node]
        parents = []
        p = node
        while p > 0:
            parents.append(p)
            p = int(tree.parent[p])
        prefix = np.concatenate([PROMPT, *[tree.turns[q].token_ids for q in reversed(parents[1:])]])
        with torch.no_grad():
            full = torch.as_tensor(np.concatenate([prefix, t.token_ids]))[None]
            logp = torch.log_softmax(model(input_ids=full).logits[0, :-1].float(), -1)
            tok_lp = logp[prefix.size - 1 :].gather(-1, full[0, prefix.size :, None]).squeeze(-1).numpy()
        t.logprobs[:] = tok_lp * t.loss_mask
    return tree


@pytest.mark.parametrize("estimator", ["grpo", "tree_grpo", "treerpo"])
def test_update_raises_rewarded_path_and_lowers_failed_path(tiny_policy, estimator: str) -> None:
    import copy

    model = copy.deepcopy(tiny_policy.model)
    tree = build_tree(model)
    good_before = path_logprob(model, PROMPT, np.concatenate([GOOD, OBS, GOOD]))
    bad_before = path_logprob(model, PROMPT, np.concatenate([BAD, OBS, BAD]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    settings = UpdateSpec(estimator=estimator, minibatch=64, minibatches=0, epochs=1)
    first = policy_update(model, opt, [tree], settings, pad_id=0, rng=np.random.default_rng(0))
    assert first["rows"] == 4 and first["tokens"] == 4 * 8
    assert abs(first["approx_kl"]) < 1e-5 and first["clip_fraction"] == 0.0  # behaviour == current policy
    for _ in range(4):
        policy_update(model, opt, [tree], settings, pad_id=0, rng=np.random.default_rng(0))
    good_after = path_logprob(model, PROMPT, np.concatenate([GOOD, OBS, GOOD]))
    bad_after = path_logprob(model, PROMPT, np.concatenate([BAD, OBS, BAD]))
    assert good_after > good_before + 0.5
    assert bad_after < bad_before - 0.5


def test_update_without_signal_still_takes_its_optimizer_step_with_a_zero_gradient(tiny_policy) -> None:
    import copy

    model = copy.deepcopy(tiny_policy.model)
    tree = RolloutTree.new(prompt_ids=PROMPT)
    tree.add_rollout([turn(GOOD)], reward=1.0)
    tree.add_rollout([turn(BAD)], reward=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for rows in ("count", "drop"):
        stats = policy_update(
            model,
            opt,
            [tree],
            UpdateSpec(estimator="grpo", minibatches=2, zero_advantage_rows=rows),
            pad_id=0,
            rng=np.random.default_rng(0),
        )
        assert stats["rows"] == 0.0 and stats["paths"] == 2.0 and stats["optimizer_steps"] == 2.0
        assert stats["adv_sq"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


class CountingSGD(torch.optim.SGD):  # type: ignore[misc]
    steps = 0

    def step(self, closure=None):  # type: ignore[no-untyped-def]
        self.steps += 1
        return super().step(closure)


def trees_with_paths(n_trees: int) -> list[RolloutTree]:
    out = []
    for i in range(n_trees):
        tree = RolloutTree.new(prompt_ids=PROMPT)
        tree.add_rollout([turn(GOOD, OBS), turn(GOOD)], reward=1.0)
        tree.add_rollout([turn(BAD, OBS), turn(BAD)], reward=float(i % 2))  # odd trees: no signal
        tree.add_replay(1, [turn(BAD)], reward=0.0)
        out.append(tree)
    return out


@pytest.mark.parametrize("minibatches", [1, 3])
def test_every_method_takes_the_same_optimizer_steps_whatever_its_paths(
    tiny_policy, minibatches: int
) -> None:
    # a method that keeps 3x the paths (tree methods with replays) gets exactly as many optimizer steps
    import copy

    counts = []
    for n_trees in (1, 3, 8):
        model = copy.deepcopy(tiny_policy.model)
        opt = CountingSGD(model.parameters(), lr=1e-3)
        settings = UpdateSpec(estimator="treerpo", minibatches=minibatches, epochs=2)
        stats = policy_update(
            model, opt, trees_with_paths(n_trees), settings, pad_id=0, rng=np.random.default_rng(0)
        )
        assert stats["paths"] == 3 * n_trees
        assert stats["optimizer_steps"] == opt.steps == 2 * minibatches
        counts.append(opt.steps)
    assert len(set(counts)) == 1
    # the legacy size-based split: more paths, more steps (why it is not the default)
    model = copy.deepcopy(tiny_policy.model)
    opt = CountingSGD(model.parameters(), lr=1e-3)
    legacy = UpdateSpec(estimator="treerpo", minibatch=4, minibatches=0)
    policy_update(model, opt, trees_with_paths(8), legacy, pad_id=0, rng=np.random.default_rng(0))
    assert opt.steps == 6  # 24 paths / 4


def test_zero_advantage_rows_count_in_the_token_mean_denominator(tiny_policy) -> None:
    # one SGD step (lr 1): under "count" the gradient is the "drop" gradient scaled by
    # (tokens of paths with signal) / (tokens of all paths), verl's agg_loss token-mean over the minibatch
    import copy

    unanimous = RolloutTree.new(prompt_ids=PROMPT)
    unanimous.add_rollout([turn(GOOD, OBS), turn(GOOD)], reward=1.0)
    unanimous.add_rollout([turn(BAD, OBS), turn(BAD)], reward=1.0)  # zero advantage on both paths
    trees = [trees_with_paths(1)[0], unanimous]  # the first: rewards 1, 0, 0 (every path has signal)
    base = torch.cat([p.detach().reshape(-1) for p in tiny_policy.model.parameters()])
    moves, stats = {}, {}
    for rows in ("count", "drop"):
        model = copy.deepcopy(tiny_policy.model)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        settings = UpdateSpec(estimator="grpo", minibatches=1, zero_advantage_rows=rows, max_grad_norm=1e9)
        stats[rows] = policy_update(model, opt, trees, settings, pad_id=0, rng=np.random.default_rng(0))
        moves[rows] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - base
    assert stats["count"]["rows"] == stats["drop"]["rows"] == 3
    assert stats["count"]["paths"] == 5
    signal_tokens, all_tokens = stats["drop"]["loss_tokens"], stats["count"]["loss_tokens"]
    assert all_tokens == signal_tokens + 2 * 8  # the unanimous group's two paths of 8 model tokens
    assert moves["drop"].abs().max() > 1e-4
    assert torch.allclose(moves["count"], moves["drop"] * (signal_tokens / all_tokens), atol=1e-6, rtol=1e-4)


def test_update_settings_reject_settings_that_cannot_take_effect() -> None:
    with pytest.raises(ValueError, match=r"exactly one of optim\.minibatches"):
        UpdateSpec(minibatch=8)  # minibatches defaults to 1
    with pytest.raises(ValueError, match="loss_scale_tokens"):
        UpdateSpec(loss_scale_tokens=64)
    # Dr. GRPO's L = 0 means max_new_tokens x max_turns: the spec resolves it, the update refuses it unresolved
    norm = TraceSpec(update=UpdateSpec(loss_agg="seq-mean-token-sum-norm"), max_turns=3)
    assert norm.resolved_update("math_python").loss_scale_tokens == norm.sampling.max_new_tokens * 3
    with pytest.raises(ValueError, match="loss_scale_tokens"):
        policy_update(None, None, [], norm.update, pad_id=0, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="zero_advantage_rows"):
        UpdateSpec(zero_advantage_rows="keep")


def uneven_tree(rng: np.random.Generator) -> RolloutTree:
    """Paths of 1-3 turns with mixed rewards and off-policy behaviour log-probs (so some tokens clip)."""
    tree = RolloutTree.new(prompt_ids=PROMPT)
    tree.add_rollout([turn(GOOD, OBS), turn(GOOD)], reward=1.0)
    tree.add_rollout([turn(BAD)], reward=0.0)
    tree.add_rollout([turn(GOOD, OBS), turn(BAD, OBS), turn(GOOD)], reward=1.0)
    tree.add_rollout([turn(BAD, OBS), turn(BAD)], reward=0.0)
    tree.add_replay(1, [turn(BAD)], reward=0.0)
    for t in tree.turns[1:]:
        t.logprobs[:] = -rng.uniform(0.5, 4.0, t.logprobs.size) * t.loss_mask
    return tree


@pytest.mark.parametrize(
    "loss_agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
@pytest.mark.parametrize("packing", ["none", "tree"])
def test_micro_batches_give_the_whole_minibatchs_gradient(
    tiny_policy, loss_agg: str, kl_coef: float, packing: str
) -> None:
    # one SGD step (lr 1, no clipping) moves the weights by exactly minus the gradient: splitting each minibatch
    # into forward passes of a few rows must move them the same way, and report the same statistics. In float64:
    # an lr-1 step of float32 weights moves by up to ~2, where one float32 rounding in a differently summed
    # gradient (other passes, or packed rows) is already about the tolerance.
    import copy

    from trace_rl.train.update import micro_batches, training_rows

    tree = uneven_tree(np.random.default_rng(0))
    ref = copy.deepcopy(tiny_policy.model).double()
    with (
        torch.no_grad()
    ):  # a reference policy that differs from the trained one, so the KL term has a gradient
        for p in ref.parameters():
            p.add_(0.01 * torch.randn_like(p))
    moved, reported = [], []
    for micro_tokens in (0, 10, 30, 50):  # 10: below every row's width, each row its own pass
        model = copy.deepcopy(tiny_policy.model).double()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        settings = UpdateSpec(
            estimator="treerpo", minibatch=4, minibatches=0, loss_agg=loss_agg, kl_coef=kl_coef, max_grad_norm=1e9,
            micro_tokens=micro_tokens, loss_scale_tokens=64 if loss_agg == "seq-mean-token-sum-norm" else 0,
            packing=packing,
        )  # fmt: skip
        rows = training_rows([tree], settings)
        passes = micro_batches(rows[:4], settings)
        widths = [[len(r.prompt_ids) + len(r.token_ids) for r in m] for m, _, _ in passes]
        assert sum(len(w) for w in widths) == 4  # rows of 8-22 tokens
        assert len(passes) == 1 if micro_tokens == 0 else 1 < len(passes) <= 4
        assert all(len(w) == 1 or len(w) * max(w) <= micro_tokens for w in widths if micro_tokens)
        assert sum(share for _, _, share in passes) == pytest.approx(1.0)
        stats = policy_update(
            model, opt, [tree], settings, pad_id=0, rng=np.random.default_rng(1), ref_model=ref
        )
        moved.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        reported.append(stats)
    base = torch.cat([p.detach().reshape(-1) for p in tiny_policy.model.parameters()]).double()
    assert (moved[0] - base).abs().max() > 1e-4  # the step did something
    assert reported[0]["clip_fraction"] > 0  # off-policy tokens: the clipped branch is exercised
    for other, stats in zip(moved[1:], reported[1:], strict=True):
        assert torch.allclose(other, moved[0], atol=1e-6, rtol=1e-5)
        for key, value in reported[0].items():
            if key != "forward_tokens":  # the passes' cost, which the split changes by design
                assert stats[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
