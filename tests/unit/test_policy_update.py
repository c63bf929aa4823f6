"""policy_update moves probability toward rewarded paths and away from failed ones (tiny policy, real loss)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trace_rl.train.update import UpdateSettings, policy_update  # noqa: E402
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
    settings = UpdateSettings(estimator=estimator, minibatch=64, epochs=1)
    first = policy_update(model, opt, [tree], settings, pad_id=0, rng=np.random.default_rng(0))
    assert first["rows"] == 4 and first["tokens"] == 4 * 8
    assert abs(first["approx_kl"]) < 1e-5 and first["clip_fraction"] == 0.0  # behaviour == current policy
    for _ in range(4):
        policy_update(model, opt, [tree], settings, pad_id=0, rng=np.random.default_rng(0))
    good_after = path_logprob(model, PROMPT, np.concatenate([GOOD, OBS, GOOD]))
    bad_after = path_logprob(model, PROMPT, np.concatenate([BAD, OBS, BAD]))
    assert good_after > good_before + 0.5
    assert bad_after < bad_before - 0.5


def test_update_skips_groups_without_signal(tiny_policy) -> None:
    import copy

    model = copy.deepcopy(tiny_policy.model)
    tree = RolloutTree.new(prompt_ids=PROMPT)
    tree.add_rollout([turn(GOOD)], reward=1.0)
    tree.add_rollout([turn(BAD)], reward=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = policy_update(
        model, opt, [tree], UpdateSettings(estimator="grpo"), pad_id=0, rng=np.random.default_rng(0)
    )
    assert stats == {"rows": 0.0, "tokens": 0.0}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
